"""A victim a preemption's eviction finds terminating already (its owner deleting it since the pass listed it) is no
eviction of the preemption's: its hold names it as only waited for (`AWAITED`), as the pods terminating already that
it waits for are. It was written as a victim evicted for the pod (`evicted` alone): stuck past its grace it kept the
hold (up to the hour, then past it, said "evicted for it" with a PreemptionStuck Event), where a pod only waited for
gives the hold back and the pod plans afresh. One whose room is not coming for another reason (its grace ending
after the hour a hold lasts, a DaemonSet's made again on its node) gives the hold back too, said why: it was said
stuck past its grace (`Holds._not_coming`). Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import full, most_free, pending, reservations  # noqa: F401 (full: a fixture)

from balancer.actuate.k8s_preempt import GRACE_SLACK_S, MAX_HOLD_S
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339

GRACE_S = 30


def owner_deletes_low_1(full: FakeKube, api, clock, grace_s: float = GRACE_S) -> SecondaryScheduler:  # noqa: F811
    """urgent (4 GPUs, priority 50) chooses low-1 on a, which its owner is deleting (`grace_s`, 30 s) as it is
    read."""
    full.add(pending("urgent", 4, 50))
    ends = clock.now + grace_s
    full.before("GET", r"/namespaces/default/pods/low-1$", lambda: full.mutate(
        "pods", "low-1", "default", {"metadata": {"deletionTimestamp": rfc3339(ends)}}))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert not full.calls("POST", r"/eviction$")
    return sched


def test_a_victim_found_terminating_is_written_as_only_waited_for(full: FakeKube, api, clock):  # noqa: F811
    owner_deletes_low_1(full, api, clock)
    held = reservations(full, "a")["default/urgent"]
    assert held["evicted"] == held["awaited"] == ["default/low-1"]


def test_stuck_past_its_grace_it_gives_the_hold_back_as_one_waited_for(full: FakeKube, api, clock):  # noqa: F811
    """Stuck (a finalizer): the hold is given back, said waited for, and urgent plans afresh; it was kept."""
    sched = owner_deletes_low_1(full, api, clock)
    clock.advance(GRACE_S + GRACE_SLACK_S + 30)
    sched.schedule_once()
    assert "default/urgent" not in reservations(full, "a")
    assert ("the room it waits for on a is not coming (default/low-1, waited for, is stuck terminating past its "
            "grace") in sched.reasons["default/urgent"]


def given_back(full: FakeKube, sched: SecondaryScheduler, clock, after_s: float) -> str:  # noqa: F811
    """The pass `after_s` on: urgent's hold on a is given back; what it says why urgent waits."""
    clock.advance(after_s)
    sched.schedule_once()
    assert "default/urgent" not in reservations(full, "a")
    return sched.reasons["default/urgent"]


def test_deleted_with_a_grace_past_the_hour_it_gives_the_hold_back_not_said_stuck(full: FakeKube, api,  # noqa: F811
                                                                                   clock):
    """Its owner deleted it with a 2 h grace: its room does not come within the hour a hold lasts, so the hold is
    given back, said so. It was said "stuck terminating past its grace: a finalizer, or a kubelet that hangs?" a
    minute into a grace of two hours (review r2)."""
    sched = owner_deletes_low_1(full, api, clock, grace_s=2 * MAX_HOLD_S)
    assert reservations(full, "a")["default/urgent"]["awaited"] == ["default/low-1"]
    said = given_back(full, sched, clock, 60)
    assert ("the room it waits for on a is not coming (default/low-1, waited for: its grace ends after the hour a "
            "hold lasts)") in said
    assert "stuck" not in said and "finalizer" not in said and sched.stuck_holds == []


def test_a_daemonset_victim_found_terminating_is_said_made_again_not_stuck(full: FakeKube, api, clock):  # noqa: F811
    """low-1 is a DaemonSet's, made again on its node: its room is not coming, so the hold is given back, said so,
    within its grace. It was said stuck terminating past its grace (review r2)."""
    full.mutate("pods", "low-1", "default", {"metadata": {"ownerReferences": [
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "agent", "uid": "ds-1", "controller": True}]}})
    said = given_back(full, owner_deletes_low_1(full, api, clock), clock, 10)
    assert ("the room it waits for on a is not coming (default/low-1, waited for, is made again on its node (a "
            "DaemonSet's or a static pod's))") in said
    assert "stuck" not in said and "finalizer" not in said
