"""A victim a preemption's eviction finds gone already (404: deleted since the pass's list) is named by no hold (there
is nothing to wait for), yet the pass's view of its node still counts the room it took: the other holds resumed on
that node in the pass count that room as free (`Holds._leaving`). Counted by the holds that name them alone, the
pods found gone were not, and another hold there, whose room they freed, was given back in the same pass as "others
took or hold the room its evictions made", its victim evicted for nothing. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending, reservations
from test_k8s_preemption_found_terminating_same_pass import q_evicted_w

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def test_a_victim_found_gone_frees_room_for_the_holds_resumed_after_it_in_the_pass(kube: FakeKube, api, clock):
    """a (8 GPUs): w (priority 1) and x (priority 2) bound; q (4 GPUs, priority 100) evicts w. At the next pass p (as
    important as q, so q's hold is held against it, and first by name) waits for w and chooses x, which its owner
    deletes as p's eviction reads it (404): p holds a waiting for w alone, and q, resumed after it, still has w leaving
    and x's room free for the 8 GPUs the two holds take: kept, not given back."""
    sched = q_evicted_w(kube, api, clock)
    kube.before("GET", r"/namespaces/default/pods/x$", lambda: kube.delete("pods", "x", "default"))
    clock.advance(5)
    sched.schedule_once()
    held = reservations(kube, "a")
    assert "x gone already" in sched.reasons["default/p"]              # found gone: no eviction made
    assert held["default/p"]["evicted"] == ["default/w"] and held["default/p"]["awaited"] == ["default/w"]
    assert "others took" not in sched.reasons["default/q"] and "given back" not in sched.reasons["default/q"]
    assert held["default/q"]["evicted"] == ["default/w"]               # still held for q, w still its victim
    assert len(kube.calls("POST", r"/eviction$")) == 1                 # w alone: x was gone


def test_a_victim_found_gone_before_an_eviction_refused_still_frees_room_for_the_holds_resumed_after_it(
        kube: FakeKube, api, clock):
    """a (8 GPUs): w (priority 1, 4 GPUs), x (priority 3) and y (priority 2, 2 GPUs each) bound; q (4 GPUs, priority
    100) evicts w, and z (2 GPUs) is bound there by another scheduler (one that does not read the holds) into half of
    w's room. At the next pass p (2 GPUs, as important as q, so q's hold is held against it, and first by name)
    chooses x and y: x is deleted by its owner as p's eviction reads it (404), y's eviction is refused (429), so p's
    preemption made nothing for sure and gives the node back. x's room is free all the same: q, resumed after it, has
    2 GPUs free and x's 2 for its 4, and keeps its hold. The gone victim was counted only where the evictions after
    it all went (or some were made): q's hold was given back as though others took the room."""
    for obj in (node("a", 8), bound("w", "a", 4, 1), bound("x", "a", 2, 3), bound("y", "a", 2, 2),
                pending("q", 4, 100)):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/w", "a")]
    kube.add(bound("z", "a", 2, 100))                                  # into half of w's room, holds unread
    kube.add(pending("p", 2, 100))
    kube.before("GET", r"/namespaces/default/pods/x$", lambda: kube.delete("pods", "x", "default"))
    kube.inject("POST", r"/pods/y/eviction$", 429)
    clock.advance(5)
    sched.schedule_once()
    held = reservations(kube, "a")
    assert "preemption failed" in sched.reasons["default/p"] and "default/p" not in held   # given back
    assert "others took" not in sched.reasons["default/q"] and "given back" not in sched.reasons["default/q"]
    assert "default/q" in held                                         # still held for q
    assert not kube.calls("POST", r"/pods/[wxz]/eviction$")[1:]        # w's alone: x was gone, z is not lower
