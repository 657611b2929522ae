"""A pod bound on the node held for it, whose preemption there asked an eviction without an answer: the binding uses
its hold up, the node is given back (`Binder._bound_to`), then the doubted victim is read (`Preemptor.release`:
counted where it landed). The read came first: an API hanging on it spent the pod's turn, and the give-back waited
for the reservation to expire, as 91d7b730 fixed for the other releases. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import events, reservations
from test_k8s_preemption_unanswered_release import doubted, order


def test_a_pod_bound_on_its_own_held_node_gives_it_back_before_its_doubted_victim_is_read(kube: FakeKube, api, clock):
    sched = doubted(kube, api, clock, lambda: kube.delete("pods", "p", "default"))   # landed: p gone
    since = len(kube.requests)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "a"}
    assert order(kube, since) == ["give back", "read p"]
    assert reservations(kube, "a") == {}
    assert sched.preempted == [("default/p", "a")]
    assert events(kube, "p") == [("Preempted", "Preempted by default/urgent on node a")]
