"""A terminating pod whose `deletionTimestamp` cannot be read is within its grace for every reader
(`k8s_preempt.past_grace`): `room_coming` counted its room as coming, while `k8s_stuck._still_there` took it as past
its grace, so a victim evicted for a pod and read so kept the hold past the hour, said stuck (a PreemptionStuck Event,
`stuck_holds`, the alert), for a pod nothing says is stuck. Now the hold lapses at the hour as any does, and the pod
waits there for the victim again (its room coming), evicting no one else. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import most_free, reservations
from test_k8s_preemption_grace import HOUR, checkpointing, two_nodes
from test_k8s_preemption_stuck import passes_until, stuck_events

from balancer.actuate.k8s_preempt import past_grace
from balancer.actuate.k8s_scheduler import SecondaryScheduler


def test_a_victim_whose_grace_end_cannot_be_read_is_not_said_stuck_and_is_waited_for(kube: FakeKube, api, clock):
    waiting_for_unreadable(kube, api, clock)


def waiting_for_unreadable(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """urgent evicts train, which terminates with an unreadable `deletionTimestamp`: two hours of passes, urgent
    waiting for it, never said stuck. The scheduler."""
    two_nodes(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    start = clock.now
    sched.schedule_once()
    assert sched.preempted == [("default/train", "a")]
    train = checkpointing("train", "a", 8, 1)
    train["metadata"]["deletionTimestamp"] = "not a time"               # terminating, its end unreadable
    kube.add(train)
    passes_until(sched, clock, start + 2 * HOUR)
    assert sched.stuck_holds == [] and stuck_events(kube) == []
    assert reservations(kube, "a")["default/urgent"]["awaited"] == ["default/train"]   # waited for again
    assert len(kube.calls("POST", r"/eviction$")) == 1                 # low-3 on b not evicted
    return sched


def test_an_unreadable_end_is_within_the_grace():
    assert not past_grace(None, 1e12) and not past_grace(0.0, 1e12)   # 0.0: `Usage.deleting` of one unreadable
    assert past_grace(1000.0, 1060.0) and not past_grace(1000.0, 1059.0)
