"""Whose wait a pod stuck terminating ends: only the holds that only wait for it (`AWAITED`). One node, two holds:
first evicted x there (x is its victim, killed for that node), second (as important, so first's hold is held against
it) only waits for x and y, both terminating as its hold began. x gets stuck past its grace (a finalizer). Before,
`Holds._leaving` merged the waits of every hold on the node: x, awaited by second, was dropped from the room first's
victims free, and first's hold was given back as "others took or hold the room its evictions made", its victim
stuck and the room it was killed for lost. Now each hold's own `AWAITED` decides for the pods it names: first's hold
goes on (x evicted for it), second's is given back as waiting for a pod that is stuck. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, most_free, pending, reservations
from test_k8s_preemption_awaiting_grace import going

from balancer.actuate.k8s_preempt import GRACE_SLACK_S
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339

X_GRACE_S = 30


def two_holds(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """a (8 GPUs): x (priority 1) and y (priority 200) bound; first (4 GPUs, priority 100) evicts x; y is deleted by
    its owner (30 min grace), and second (4 GPUs, priority 100) waits on a for x and y. The scheduler, then."""
    kube.add(node("a", 8))
    kube.add(bound("x", "a", 4, 1))
    kube.add(bound("y", "a", 4, 200))
    kube.add(pending("first", 4, 100))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sched.preempted == [("default/x", "a")]
    going(kube, "x", "a", 4, 1, clock.now + X_GRACE_S)                # as its kubelet keeps it while it terminates
    kube.mutate("pods", "y", "default", {"metadata": {"deletionTimestamp": rfc3339(clock.now + 1800)}})
    kube.add(pending("second", 4, 100))
    clock.advance(5)
    sched.schedule_once()
    held = reservations(kube, "a")
    assert held["default/first"]["evicted"] == ["default/x"] and "awaited" not in held["default/first"]
    assert held["default/second"]["awaited"] == ["default/x", "default/y"]
    return sched


def test_a_victim_stuck_keeps_the_hold_it_was_evicted_for_though_another_hold_only_waits_for_it(kube, api, clock):
    sched = two_holds(kube, api, clock)
    clock.advance(X_GRACE_S + GRACE_SLACK_S + 30)                     # x past its grace and the slack: stuck
    sched.schedule_once()
    first = sched.reasons["default/first"]
    assert "others took" not in first and "given back" not in first
    held = reservations(kube, "a")
    assert held["default/first"]["evicted"] == ["default/x"]          # still held for first, x still its victim
    assert "default/second" not in held                               # second waited for x: its room is not coming
    assert ("the room it waits for on a is not coming (default/x, waited for, is stuck terminating past its grace"
            in sched.reasons["default/second"])
    assert len(kube.calls("POST", r"/eviction$")) == 1
