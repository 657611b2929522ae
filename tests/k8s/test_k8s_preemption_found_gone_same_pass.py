"""A victim a preemption's eviction finds gone already (404: deleted since the pass's list) is named by no hold (there
is nothing to wait for), yet the pass's view of its node still counts the room it took: the other holds resumed on
that node in the pass count that room as free (`Holds._leaving`). Counted by the holds that name them alone, the
pods found gone were not, and another hold there, whose room they freed, was given back in the same pass as "others
took or hold the room its evictions made", its victim evicted for nothing. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import reservations
from test_k8s_preemption_found_terminating_same_pass import q_evicted_w


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
