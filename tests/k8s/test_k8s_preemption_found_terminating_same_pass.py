"""A victim a preemption's eviction finds terminating already is only waited for (`AWAITED`), and is leaving its node
for the rest of the pass all the same: the other holds resumed on that node in the pass count its room as coming
(`Holds._leaving`). The pass's list still shows it running (it was read before its owner deleted it), so asked of
that stale reading (`room_coming`: not terminating) its room was not coming, and another hold there, whose room it
frees, was given back in the same pass as "others took or hold the room its evictions made", its victim evicted for
nothing. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending, reservations
from test_k8s_preemption_awaiting_grace import going

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339

GRACE_S = 600


def q_evicted_w(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """a (8 GPUs): w (priority 1) and x (priority 2) bound; q (4 GPUs, priority 100) evicts w, which terminates; then
    p (4 GPUs, priority 100) comes: the scheduler."""
    for obj in (node("a", 8), bound("w", "a", 4, 1), bound("x", "a", 4, 2), pending("q", 4, 100)):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/w", "a")]
    going(kube, "w", "a", 4, 1, clock.now + GRACE_S)                  # as its kubelet keeps it while it terminates
    kube.add(pending("p", 4, 100))
    return sched


def test_a_victim_found_terminating_frees_room_for_the_holds_resumed_after_it_in_the_pass(kube: FakeKube, api, clock):
    """a (8 GPUs): w (priority 1) and x (priority 2) bound; q (4 GPUs, priority 100) evicts w. At the next pass p (as
    important as q, so q's hold is held against it, and first by name) waits for w and chooses x, which its owner
    deletes as p's eviction reads it: p holds a waiting for both, and q, resumed after it, still has w and x leaving
    for the 8 GPUs the two holds take."""
    sched = q_evicted_w(kube, api, clock)
    ends = clock.now + GRACE_S
    kube.before("GET", r"/namespaces/default/pods/x$", lambda: kube.mutate(
        "pods", "x", "default", {"metadata": {"deletionTimestamp": rfc3339(ends)}}))
    clock.advance(5)
    sched.schedule_once()
    held = reservations(kube, "a")
    assert held["default/p"]["awaited"] == ["default/w", "default/x"]    # x found terminating: only waited for
    assert "others took" not in sched.reasons["default/q"] and "given back" not in sched.reasons["default/q"]
    assert held["default/q"]["evicted"] == ["default/w"]               # still held for q, w still its victim
    assert len(kube.calls("POST", r"/eviction$")) == 1                 # w alone: x was its owner's deletion
