"""A victim a preemption's eviction finds terminating already (its owner deleting it since the pass listed it) is no
eviction of the preemption's: its hold names it as only waited for (`AWAITED`), as the pods terminating already that
it waits for are. It was written as a victim evicted for the pod (`evicted` alone): stuck past its grace it kept the
hold (up to the hour, then past it, said "evicted for it" with a PreemptionStuck Event), where a pod only waited for
gives the hold back and the pod plans afresh. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import full, most_free, pending, reservations  # noqa: F401 (full: a fixture)

from balancer.actuate.k8s_preempt import GRACE_SLACK_S
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339

GRACE_S = 30


def owner_deletes_low_1(full: FakeKube, api, clock) -> SecondaryScheduler:  # noqa: F811
    """urgent (4 GPUs, priority 50) chooses low-1 on a, which its owner is deleting (30 s grace) as it is read."""
    full.add(pending("urgent", 4, 50))
    ends = clock.now + GRACE_S
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
