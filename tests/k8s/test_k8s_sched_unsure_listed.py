"""A binding of unknown outcome (every try unanswered, the pod unreadable: `bind_unsure`) holds its node's room in
the next pass also where that pass lists the bound pods itself (without watches, a library's passes or `--once`; with
a bound-pod watch that has not synced) and its list does not show it: the binding may have been received and be
written after that list (its answer lost). Before, such a list counted only what it showed (a consistent list shows
every binding made, but not one still in flight), the assumed binding only kept its own pod out of the pending ones,
and the next pass bound another pod onto its GPUs; the late binding then landed on top (k8s_bind's docstring said the
next pass would not offer its room). One the list shows is not counted twice. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node, pod
from test_k8s_sched_cut_watch import first, unsure, waiting
from test_k8s_sched_unsynced_assumed import unsynced

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def late(kube: FakeKube, name: str) -> None:
    """The binding of `name` the API server received lands now, on a."""
    kube.mutate("pods", name, "default", {"spec": {"nodeName": "a"}})


def test_without_watches_a_binding_of_unknown_outcome_holds_its_node_in_the_next_pass(
        kube: FakeKube, api, clock) -> None:
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, sleep=lambda s: None)
    kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
    unsure(kube, sched, "big")   # assumed on a, not bound (yet)
    kube.add(pod("small", gpus=1, scheduler="gputide", phase="Pending"))
    assert sched.schedule_once() == {"default/small": None}   # a's 8 GPUs may be big's
    late(kube, "big")
    assert kube.get("pods", "small", "default")["spec"].get("nodeName") is None
    assert sched.schedule_once() == {"default/small": None}   # listed now: counted once, not twice
    clock.advance(sched.assume_s)
    assert sched.schedule_once() == {"default/small": None}


def test_before_the_bound_pod_watch_syncs_a_binding_of_unknown_outcome_holds_its_node(
        kube: FakeKube, api, clock) -> None:
    sched, _ = unsynced(kube, api, clock, hidden="nothing")
    try:
        waiting(kube, sched, ["big"], 8)
        unsure(kube, sched, "big")
        waiting(kube, sched, ["small"], 1)
        assert sched.schedule_once() == {"default/small": None}
        late(kube, "big")
        assert kube.get("pods", "small", "default")["spec"].get("nodeName") is None
    finally:
        sched.close()
