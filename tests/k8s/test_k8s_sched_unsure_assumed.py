"""A binding whose outcome is unknown (every try unanswered, and the pod unreadable: `bind_unsure`) is assumed on the
node asked for, as a binding made: the next pass neither offers its GPUs to another pod nor places the pod again,
until the bound-pod cache shows where it is, or the pod read back past `assume_s` is on no node. Before, it counted
on its node for its own pass only, and the next pass bound another pod onto the same GPUs whenever the cache had not
shown it yet (audit a1: test_probe_unsure.py). Against the fake API server, with watches."""

from __future__ import annotations

from fakeapi import FakeKube, node, pod
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler

BOUND_LIST = r"/pods\?.*spec\.nodeName%21%3D"   # the bound pods' list and watch (the pending ones select nodeName=)


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def unanswered(kube: FakeKube, name: str, made: bool):
    """Every try of `name`'s binding answers 504 (the first having made it when `made`), and reading the pod back
    answers 500: the faults, to end them."""
    if made:
        kube.before("POST", rf"/pods/{name}/binding$",
                    lambda: kube.mutate("pods", name, "default", {"spec": {"nodeName": "a"}}))
    return kube.inject("POST", rf"/pods/{name}/binding$", 504, count=20), kube.inject(
        "GET", rf"/namespaces/default/pods/{name}$", 500, count=20)


def watching(kube: FakeKube, api, clock) -> SecondaryScheduler:
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0,
                               sleep=lambda s: None).start()
    eventually(lambda: all(w.synced for w in sched.watches.values()))
    return sched


def test_a_binding_of_unknown_outcome_holds_its_node_in_the_next_pass(kube: FakeKube, api, clock) -> None:
    sched = watching(kube, api, clock)
    try:
        kube.inject("GET", BOUND_LIST, 500, count=10_000)   # the bound-pod cache cannot show the binding
        eventually(lambda: sched.watches["bound pods"].failures > 0)
        kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])
        faults = unanswered(kube, "big", made=True)
        assert sched.schedule_once() == {"default/big": None} and sched.bind_unsure
        assert "outcome unknown" in sched.reasons["default/big"]
        for fault in faults:
            fault.remaining = 0
        kube.add(pod("small", gpus=1, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["small"])   # big is not placed again
        assert sched.schedule_once() == {"default/small": None}   # a's 8 GPUs may be big's: they are
        assert kube.get("pods", "small", "default")["spec"].get("nodeName") is None
    finally:
        sched.close()


def test_a_binding_of_unknown_outcome_that_failed_is_tried_again_once_read_back_on_no_node(
        kube: FakeKube, api, clock) -> None:
    sched = watching(kube, api, clock)
    try:
        kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])
        faults = unanswered(kube, "big", made=False)
        assert sched.schedule_once() == {"default/big": None} and sched.bind_unsure
        for fault in faults:
            fault.remaining = 0
        assert sched.pending() == []   # assumed on a: not placed again yet
        clock.advance(sched.assume_s)
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])   # read back past assume_s: on no node
        assert sched.schedule_once() == {"default/big": "a"}
    finally:
        sched.close()
