"""A victim whose eviction got no answer, found terminating by a later read, is counted as preempted only where its
`DisruptionTarget` condition does not say another deleted it: the Eviction API marks a pod it deletes
(`EvictionByEvictionAPI`, PodDisruptionConditions, on by default since Kubernetes 1.26), another disruption marks
it with its own reason, and its owner's deletion (a Deployment scaled down, a `kubectl delete`) with none. Without
a mark it is counted, as before, until this cluster is known to mark evictions (a pod read marked
`EvictionByEvictionAPI`): an older cluster never marks one. Before, every victim in doubt found terminating was
counted, with its Event `Preempted`. Against the fake API server
(which marks no pod: the tests mark them as the API server, the taint manager or the scheduler would)."""

from __future__ import annotations

import logging

import pytest
from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_unanswered import unanswered

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339

REASONS = ["PreemptionByScheduler", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"]


def terminate(kube: FakeKube, clock, name: str, reason: str | None = None) -> None:
    """`name` deleted (its grace period running), marked `DisruptionTarget` `reason` (None: unmarked)."""
    patch: dict = {"metadata": {"deletionTimestamp": rfc3339(clock.now + 30)}}
    if reason is not None:
        patch["status"] = {"conditions": [{"type": "DisruptionTarget", "status": "True", "reason": reason,
                                           "message": "deleting"}]}
    kube.mutate("pods", name, "default", patch)


def test_a_victim_terminating_unmarked_is_counted_until_the_cluster_is_known_to_mark_evictions(kube: FakeKube, api,
                                                                                                clock, caplog):
    """low-1's eviction lands unmarked (the cluster not known to mark any: counted, as before); low-2's lands marked
    (counted, and the cluster is known to mark evictions from then on); low-3's does not land, and its owner deletes
    it: unmarked, not counted, nor said preempted, and waited for all the same."""
    kube.add(node("a", 12))
    for i in (1, 2, 3):
        kube.add(bound(f"low-{i}", "a", 4, 4 - i))
    kube.add(pending("urgent", 12, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    unanswered(sched, "low-1", lambda: terminate(kube, clock, "low-1"))
    unanswered(sched, "low-2", lambda: terminate(kube, clock, "low-2", "EvictionByEvictionAPI"))
    unanswered(sched, "low-3", lambda: None)                          # not carried out: low-3 runs on
    sched.schedule_once()
    assert sched.preempted == []
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")]                 # unmarked, the cluster not known: counted
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")]                 # marked: counted
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-3"]

    terminate(kube, clock, "low-3")                                    # its owner deletes it: unmarked
    clock.advance(5)
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_preempt"):
        sched.schedule_once()
    assert sched.preempted == [] and events(kube, "low-3") == []
    assert "low-3" in caplog.text and "its owner deleted it" in caplog.text
    held = reservations(kube, "a")["default/urgent"]
    assert "victims" not in held and "default/low-3" in held["evicted"]   # waited for, as one terminating already


def doubted(kube: FakeKube, api, clock, landed) -> SecondaryScheduler:
    """urgent preempts p on a, its eviction unanswered (`landed`: what happened to p meanwhile)."""
    kube.add(node("a", 4))
    kube.add(bound("p", "a", 4, 1))
    kube.add(pending("urgent", 4, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    unanswered(sched, "p", landed)
    sched.schedule_once()
    assert sched.preempted == [] and set(reservations(kube, "a")) == {"default/urgent"}
    return sched


@pytest.mark.parametrize("reason", REASONS)
def test_a_victim_terminating_marked_by_another_disruption_is_not_counted(kube: FakeKube, api, clock, caplog,
                                                                          reason):
    """p's eviction does not land; another disruption deletes p (marked with its reason): the next pass reads it
    terminating, and waits for it without counting it, though the cluster was never seen marking an eviction."""
    sched = doubted(kube, api, clock, lambda: terminate(kube, clock, "p", reason))
    clock.advance(5)
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_preempt"):
        sched.schedule_once()
    assert sched.preempted == [] and events(kube, "p") == []
    assert f"DisruptionTarget {reason}" in caplog.text
    assert reservations(kube, "a")["default/urgent"]["evicted"] == ["default/p"]   # waited for
    assert not sched.holds.preemptor.marks_evictions


def test_a_released_victim_marked_by_another_disruption_is_not_counted(kube: FakeKube, api, clock):
    """The preemption ends (urgent deleted) before a pass reads p: its release reads p terminating, marked by the
    taint manager, and does not count it (one marked by the Eviction API, or unmarked here, is counted)."""
    sched = doubted(kube, api, clock, lambda: terminate(kube, clock, "p", "DeletionByTaintManager"))
    kube.delete("pods", "urgent", "default")
    kube.add(pending("other", 8, 5))                                   # a pass that reads the nodes (fits none)
    clock.advance(5)
    sched.schedule_once()
    assert reservations(kube, "a") == {}
    assert sched.preempted == [] and events(kube, "p") == []
