"""A victim whose earlier eviction got no answer, read gone (404) as its hold is given back within a pass
(`Preemptor.release`, `_went`), frees its room for the rest of that pass as one an eviction finds gone does
(`Preemptor.on_gone`, `Holds._gone`). Given back, that hold no longer names it, so the other holds on its node no
longer count it as leaving (`Holds._leaving`), while the pass's view still counts its room as taken: told only as
landed (`on_landed`), it was not counted free, and another hold there, resumed after it in the pass and needing that
room, was given back as though others took it. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending, reservations
from test_k8s_preemption_awaiting_grace import going
from test_k8s_preemption_unanswered import unanswered

from balancer.actuate.k8s_scheduler import SecondaryScheduler

GRACE_S = 600
MAINT = {"key": "maint", "value": "1", "effect": "NoSchedule"}


def h_evicts_v_unanswered(kube: FakeKube, api, clock, **r_spec) -> tuple[SecondaryScheduler, list[bool]]:
    """a (10 GPUs): w (priority 1) and v (priority 2), 4 GPUs each. r (6 GPUs, priority 50, `r_spec`) evicts w, which
    terminates; z (2 GPUs) is bound by another scheduler into the room left free. h (2 GPUs, as important as r, and
    first by name) waits for w and evicts v, unanswered (v runs on): h and r each count w and v as leaving. The
    scheduler, and the tries of v's eviction."""
    for obj in (node("a", 10), bound("w", "a", 4, 1), bound("v", "a", 4, 2), pending("r", 6, 50, **r_spec)):
        kube.add(obj)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    tries = unanswered(sched, "v", lambda: None)                       # v's evictions get no answer, none lands
    sched.schedule_once()
    assert sched.preempted == [("default/w", "a")]
    going(kube, "w", "a", 4, 1, clock.now + GRACE_S)                  # as its kubelet keeps it while it terminates
    kube.add(bound("z", "a", 2, 100))                                  # into the free room, holds unread
    kube.add(pending("h", 2, 50))
    clock.advance(5)
    sched.schedule_once()
    held = reservations(kube, "a")
    assert held["default/h"]["victims"] == ["default/v"] and tries     # v's eviction unanswered: left, in doubt
    assert "given back" not in sched.reasons["default/r"] and "default/r" in held
    return sched, tries


def test_a_doubted_victim_found_gone_as_its_hold_is_given_back_frees_room_for_the_holds_resumed_after_it(
        kube: FakeKube, api, clock):
    """h holds a evicting v, unanswered, r waiting for w and v there (`h_evicts_v_unanswered`). a is then tainted, r
    tolerating it, h not: at the next pass h's hold is given back (v not evicted again), and its release reads v gone
    (404). r, resumed after it, has w and v leaving for its 6 GPUs: kept, not given back."""
    sched, tries = h_evicts_v_unanswered(kube, api, clock, tolerations=[
        {"key": "maint", "operator": "Exists", "effect": "NoSchedule"}])
    kube.mutate("nodes", "a", "", {"spec": {"taints": [MAINT]}})
    kube.before("GET", r"/namespaces/default/pods/v$", lambda: kube.delete("pods", "v", "default"))
    asked = len(tries)
    clock.advance(5)
    sched.schedule_once()
    held = reservations(kube, "a")
    assert "a no longer admits it" in sched.reasons["default/h"] and "default/h" not in held   # h given back
    assert len(tries) == asked and ("default/v", "a") in sched.preempted   # v read gone at h's release: counted
    assert "others took" not in sched.reasons["default/r"] and "given back" not in sched.reasons["default/r"]
    assert held["default/r"]["evicted"] == ["default/w"]               # still held for r, w still its victim


def test_a_doubted_victim_found_gone_as_a_pass_begins_frees_room_for_the_holds_resumed_in_it(
        kube: FakeKube, api, clock):
    """h holds a evicting v, unanswered, r waiting for w and v there (`h_evicts_v_unanswered`). h is then deleted
    (not refused by a): the next pass gives its hold back as it begins (`release_gone`), before the bound pods are
    grouped for preemption (`Holds._by_node`), and that release reads v gone (404) while the pass's list, read before,
    still shows it. r, resumed in the pass, has w and v leaving for its 6 GPUs: kept, not given back. Told while
    nothing was grouped yet, v's room was not counted free (`Holds._gone` did nothing), and r was given back as though
    others took it."""
    sched, tries = h_evicts_v_unanswered(kube, api, clock)
    kube.delete("pods", "h", "default")                                # h waits no more: its hold given back
    kube.before("GET", r"/namespaces/default/pods/v$", lambda: kube.delete("pods", "v", "default"))
    asked = len(tries)
    clock.advance(5)
    sched.schedule_once()
    held = reservations(kube, "a")
    assert "default/h" not in held and len(tries) == asked             # given back as the pass began, v not evicted
    assert ("default/v", "a") in sched.preempted                       # v read gone at h's release: counted
    assert "others took" not in sched.reasons["default/r"] and "given back" not in sched.reasons["default/r"]
    assert held["default/r"]["evicted"] == ["default/w"]               # still held for r, w still its victim
