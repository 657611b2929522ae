"""A pod that holds two nodes, one of them where its preemption asked an eviction without an answer, deleted or bound
elsewhere: both nodes are given back, then the doubted victim is read (`Preemptor.release`: counted where it landed).
The read came after its own node's give-back but before the next node's (`release_gone`, `release_elsewhere`): an
API hanging on it spent the pass's time (or the pod's turn) and the other node's give-back waited a pass, held for no
one. Against the fake API server."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node
from test_k8s_preemption import pending, reservations
from test_k8s_preemption_unanswered_release import doubted

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION


def also_held(kube: FakeKube, name: str) -> None:
    """Node `name` (4 GPUs, cordoned) held for urgent too, as a on which it preempted (another term's hold, say)."""
    kube.add(node(name, 4))
    kube.mutate("nodes", name, "", {"spec": {"unschedulable": True}, "metadata": {"annotations": {
        RESERVATION_ANNOTATION: json.dumps({"default/urgent": reservations(kube, "a")["default/urgent"]})}}})


def order(kube: FakeKube, since: int) -> list[str]:
    """The give-backs of nodes a and b and the reads of p among the requests from `since` on, in order."""
    said = []
    for r in kube.requests[since:]:
        what = r.path.split("?")[0].rsplit("/", 2)[-2:]
        if r.method == "PATCH" and what[0] == "nodes" and what[1] in ("a", "b"):
            said.append(f"give back {what[1]}")
        elif r.method == "GET" and what == ["pods", "p"]:
            said.append("read p")
    return said


def test_a_pod_deleted_gives_back_every_node_it_held_before_its_doubted_victim_is_read(kube: FakeKube, api, clock):
    sched = doubted(kube, api, clock, lambda: kube.delete("pods", "p", "default"))
    also_held(kube, "b")
    kube.delete("pods", "urgent", "default")
    kube.add(pending("other", 8, 5))                                   # a pass that reads the nodes (fits none)
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {"default/other": None}
    assert order(kube, since) == ["give back a", "give back b", "read p"]
    assert reservations(kube, "a") == reservations(kube, "b") == {}
    assert sched.preempted == [("default/p", "a")]


def test_a_pod_bound_elsewhere_gives_back_every_node_it_held_before_its_doubted_victim_is_read(kube: FakeKube, api,
                                                                                               clock):
    sched: SecondaryScheduler = doubted(kube, api, clock, lambda: None)   # p runs on
    also_held(kube, "b")
    kube.mutate("nodes", "a", "", {"spec": {"unschedulable": True}})    # urgent fits c only
    kube.add(node("c", 4))
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "c"}
    assert order(kube, since) == ["give back a", "give back b", "read p"]
    assert reservations(kube, "a") == reservations(kube, "b") == {}
    assert sched.preempted == []
