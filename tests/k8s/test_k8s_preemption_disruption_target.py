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
from test_k8s_preemption_unanswered import terminate, three_victims, unanswered

from balancer.actuate.k8s_scheduler import SecondaryScheduler

REASONS = ["PreemptionByScheduler", "DeletionByTaintManager", "DeletionByPodGC", "TerminationByKubelet"]


def owner_deletes(kube: FakeKube, clock, caplog, sched: SecondaryScheduler, name: str, *mark: str) -> None:
    """`name`'s owner deletes it (`mark`: the `DisruptionTarget` it carries, `terminate`'s; none: unmarked), and the
    next pass, the cluster known to mark evictions, reads it terminating: not counted, nor said preempted."""
    terminate(kube, clock, name, *mark)
    clock.advance(5)
    with caplog.at_level(logging.INFO, logger="balancer.actuate.k8s_preempt"):
        sched.schedule_once()
    assert sched.preempted == [] and events(kube, name) == []
    assert name in caplog.text and "its owner deleted it" in caplog.text


def test_a_victim_terminating_unmarked_is_counted_until_the_cluster_is_known_to_mark_evictions(kube: FakeKube, api,
                                                                                                clock, caplog):
    """low-1's eviction lands unmarked (the cluster not known to mark any: counted, as before); low-2's lands marked
    (counted, and the cluster is known to mark evictions from then on); low-3's does not land, and its owner deletes
    it: unmarked, not counted, nor said preempted, and waited for all the same."""
    three_victims(kube)
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

    owner_deletes(kube, clock, caplog, sched, "low-3")                 # unmarked
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


CLEARED = ("EvictionByEvictionAPI", "False")   # a mark the Eviction API gave, cleared: that eviction deleted nothing


def two_victims(kube: FakeKube, api, clock, first: str, second: str) -> SecondaryScheduler:
    """urgent to preempt `first` and `second` on a, in that order."""
    kube.add(node("a", 8))
    kube.add(bound(first, "a", 4, 2))
    kube.add(bound(second, "a", 4, 1))
    kube.add(pending("urgent", 8, 50))
    return SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)


def test_a_cleared_eviction_mark_does_not_teach_that_the_cluster_marks_evictions(kube: FakeKube, api, clock):
    """low-1's eviction lands, low-1 found terminating with a `DisruptionTarget` `EvictionByEvictionAPI` of status
    "False" (cleared): counted as one unmarked (the cluster not known to mark evictions), and it teaches nothing, so
    low-2, landed unmarked, is counted too. Taken for a mark, low-1 taught it, and low-2 went uncounted."""
    sched = two_victims(kube, api, clock, "low-1", "low-2")
    unanswered(sched, "low-1", lambda: terminate(kube, clock, "low-1", *CLEARED))
    unanswered(sched, "low-2", lambda: terminate(kube, clock, "low-2"))
    sched.schedule_once()
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")]
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")]                 # unmarked, the cluster still not known
    assert not sched.holds.preemptor.marks_evictions


def test_a_victim_deleted_with_a_cleared_mark_is_not_counted_once_the_cluster_is_known_to_mark(kube: FakeKube, api,
                                                                                               clock, caplog):
    """low-1's eviction lands marked (the cluster is known to mark evictions from then on); low-2's does not land,
    and its owner deletes it, a cleared `EvictionByEvictionAPI` (status "False") its only `DisruptionTarget`: no
    eviction deleted it, so it is not counted, as one unmarked. Taken for a mark, it was counted."""
    sched = two_victims(kube, api, clock, "low-1", "low-2")
    unanswered(sched, "low-1", lambda: terminate(kube, clock, "low-1", "EvictionByEvictionAPI"))
    unanswered(sched, "low-2", lambda: None)                          # not carried out: low-2 runs on
    sched.schedule_once()
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-1", "a")] and sched.holds.preemptor.marks_evictions

    owner_deletes(kube, clock, caplog, sched, "low-2", *CLEARED)


def test_the_cluster_is_known_to_mark_evictions_from_a_victim_never_in_doubt(kube: FakeKube, api, clock, caplog):
    """q, never evicted by this replica, is found terminating already when read to be evicted (`kubectl drain`'s
    eviction: marked `EvictionByEvictionAPI`): the cluster is known to mark evictions from then on, though no
    eviction of this replica's was in doubt. p's eviction, unanswered, does not land, and its owner deletes it
    unmarked: not counted. Were only victims in doubt to teach it, p was counted."""
    sched = two_victims(kube, api, clock, "q", "p")
    kube.before("GET", r"/namespaces/default/pods/q$", lambda: terminate(kube, clock, "q", "EvictionByEvictionAPI"))
    unanswered(sched, "p", lambda: None)                               # not carried out: p runs on
    sched.schedule_once()
    assert sched.preempted == [] and sched.holds.preemptor.marks_evictions
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/p"]

    owner_deletes(kube, clock, caplog, sched, "p")                     # unmarked
