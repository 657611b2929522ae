"""A preemption carried on (`resume`) on a node that no longer admits the pod evicts no more victims for it. mid's
preemption on a evicted low-1, low-2's eviction was refused (left for the next pass); a was then cordoned, or
tainted NoSchedule. The next pass evicted low-2 all the same (only `makes_room`, resources, was asked): a pod
killed for a pod that could never be bound there, while mid went on holding a. Now, with victims left to evict, a
node whose rules refuse the pod is given back at once, its nomination cleared, none is evicted, the pod is told
why, and it plans afresh at the next pass (kube-scheduler too lets a pod whose nominated node became unresolvable
preempt elsewhere)."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_preemption import reservations
from test_k8s_preemption_room_taken import half_preempted

REFUSALS = {
    "cordon": ({"spec": {"unschedulable": True}}, "node(s) were unschedulable"),
    "taint": ({"spec": {"taints": [{"key": "maint", "value": "1", "effect": "NoSchedule"}]}},
              "untolerated taint {maint: 1}"),
}


@pytest.mark.parametrize("change", sorted(REFUSALS))
def test_a_node_that_no_longer_admits_the_preemptor_gets_no_more_evictions(kube: FakeKube, api, clock, change):
    sched = half_preempted(kube, api, clock)
    patch, why = REFUSALS[change]
    kube.mutate("nodes", "a", "", patch)
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sched.preempted == [] and kube.get("pods", "low-2", "default") is not None   # not killed for nothing
    assert len(kube.calls("POST", r"/pods/low-2/eviction$")) == 1                      # the refused one only
    assert "default/mid" not in reservations(kube, "a")                                 # a given back
    assert not kube.get("pods", "mid", "default")["status"].get("nominatedNodeName")
    said = sched.reasons["default/mid"]
    assert "a no longer admits it" in said and why in said and "default/low-2 not evicted" in said, said
    clock.advance(5)
    sched.schedule_once()                                                                # plans afresh: b
    assert sched.preempted == [("default/low-3", "b")] and list(reservations(kube, "b")) == ["default/mid"]
    assert kube.get("pods", "low-2", "default") is not None


def test_a_node_that_still_admits_the_preemptor_gets_the_rest_evicted(kube: FakeKube, api, clock):
    """A taint the pod tolerates refuses nothing: low-2 is evicted for mid as before."""
    sched = half_preempted(kube, api, clock)
    kube.mutate("nodes", "a", "", {"spec": {"taints": [{"key": "maint", "value": "1", "effect": "PreferNoSchedule"}]}})
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sched.preempted == [("default/low-2", "a")] and "default/mid" in reservations(kube, "a")
