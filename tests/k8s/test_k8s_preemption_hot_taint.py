"""gputide's own hot taint pauses a preemption rather than ending it. mid's preemption on a evicted low-1, low-2's
eviction was refused (left for the next pass); the controller then tainted a `gputide.io/hot` NoSchedule (a
Migrate's source, lapsing within minutes, `gputide.io/hot-until`). The next pass gave a back as a node that no
longer admits mid (55fb15a) and preempted low-3 on b: another pod evicted, and the room low-1's eviction made on
a left idle. Now, where the only rule refusing mid is that taint, the preemption is paused: no one is evicted
(low-2 neither: not into a hot node), a stays held as it was, mid is told why, and once the taint goes low-2 is
evicted for it on a. Any other refusal besides (a cordon) still gives the node back. The paused hold is renewed up
to the taint's expiry (at most the hour): left as it was, it lapsed after 5 min under a taint of 15 min or more."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import reservations
from test_k8s_preemption_room_taken import half_preempted

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.k8s_preempt import GRACE_SLACK_S, MAX_HOLD_S, paused
from balancer.actuate.kubernetes import HOT_TAINT_KEY, HOT_UNTIL_ANNOTATION, parse_time, rfc3339

HOT = {"key": HOT_TAINT_KEY, "value": "true", "effect": "NoSchedule"}


def test_the_hot_taint_pauses_the_preemption_and_keeps_the_node_held(kube: FakeKube, api, clock):
    sched = half_preempted(kube, api, clock)
    held = reservations(kube, "a")["default/mid"]
    kube.mutate("nodes", "a", "", {"spec": {"taints": [HOT]}})
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert sched.preempted == [] and kube.get("pods", "low-3", "default") is not None   # no one evicted on b
    assert kube.get("pods", "low-2", "default") is not None                             # nor into the hot node
    assert reservations(kube, "a")["default/mid"] == held and reservations(kube, "b") == {}
    said = sched.reasons["default/mid"]
    assert f"paused while a is tainted {HOT_TAINT_KEY}" in said and "default/low-2 not evicted" in said, said
    kube.mutate("nodes", "a", "", {"spec": {"taints": []}})   # the taint lapses: carried on where it was
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")] and kube.get("pods", "low-3", "default") is not None


def test_the_hot_taint_and_a_cordon_give_the_node_back(kube: FakeKube, api, clock):
    sched = half_preempted(kube, api, clock)
    kube.mutate("nodes", "a", "", {"spec": {"taints": [HOT], "unschedulable": True}})
    clock.advance(5)
    assert sched.schedule_once() == {"default/mid": None}
    assert "default/mid" not in reservations(kube, "a") and "a no longer admits it" in sched.reasons["default/mid"]


def hot(kube: FakeKube, name: str, until: float | None) -> None:
    """The controller's hot taint on `name`, with its expiry `until` (none written when None), as it renews it."""
    expiry = {HOT_UNTIL_ANNOTATION: rfc3339(until) if until else None}
    kube.mutate("nodes", name, "", {"metadata": {"annotations": expiry}, "spec": {"taints": [HOT]}})


def test_the_paused_hold_outlasts_a_taint_kept_for_a_quarter_hour_then_carries_on(kube: FakeKube, api, clock):
    """The hold lasted `reserve_s` (5 min) and was not renewed while paused: it ran out under the taint (at least
    15 min), and mid preempted low-3 on b anyway while low-1's room on a sat idle. Now it is renewed up to the
    taint's expiry (`gputide.io/hot-until`) as it runs out."""
    sched = half_preempted(kube, api, clock)
    for _ in range(15):   # the node stays hot for 15 min: the controller renews the taint's expiry 15 min ahead
        hot(kube, "a", clock() + HOT_TAINT_TTL_S)
        clock.advance(60)
        assert sched.schedule_once() == {"default/mid": None}
        assert sched.preempted == [] and kube.get("pods", "low-3", "default") is not None, sched.reasons
        assert kube.get("pods", "low-2", "default") is not None and "default/mid" in reservations(kube, "a")
        assert parse_time(reservations(kube, "a")["default/mid"]["expires"]) > clock()
    kube.mutate("nodes", "a", "", {"metadata": {"annotations": {HOT_UNTIL_ANNOTATION: None}}, "spec": {"taints": []}})
    clock.advance(60)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")] and kube.get("pods", "low-3", "default") is not None


def test_a_paused_hold_is_renewed_without_an_expiry_and_lapses_at_the_hour(kube: FakeKube, api, clock):
    """No `gputide.io/hot-until` (written by hand): renewed by `reserve_s` as ordinary holds are; never past the hour
    from the preemption's start, after which mid plans afresh (b)."""
    sched = half_preempted(kube, api, clock)
    since = parse_time(reservations(kube, "a")["default/mid"]["since"])
    hot(kube, "a", None)
    while clock() < since + MAX_HOLD_S - 60:
        clock.advance(60)
        assert sched.schedule_once() == {"default/mid": None} and sched.preempted == [], sched.reasons
        assert parse_time(reservations(kube, "a")["default/mid"]["expires"]) <= since + MAX_HOLD_S
    clock.advance(120)   # past the hour: the hold lapsed, mid plans afresh
    sched.schedule_once()
    assert sched.preempted == [("default/low-3", "b")] and kube.get("pods", "low-2", "default") is not None


def test_paused_renews_up_to_the_taints_expiry_within_the_cap():
    start = 1_700_000_000.0
    entry = {"since": rfc3339(start), "expires": rfc3339(start + 300)}
    assert paused(entry, start + 900, start + 100, 300) is entry   # not running out yet
    assert paused(entry, start + 900, start + 200, 300)["expires"] == rfc3339(start + 900 + GRACE_SLACK_S)
    assert paused(entry, None, start + 200, 300)["expires"] == rfc3339(start + 500)
    assert paused(entry, start + 100, start + 200, 300)["expires"] == rfc3339(start + 500)   # its expiry past
    assert paused(entry, start + 9000, start + 200, 300)["expires"] == rfc3339(start + MAX_HOLD_S)
