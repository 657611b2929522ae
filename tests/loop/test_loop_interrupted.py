"""A cycle cut short while the loop acts: the Lease lost to another replica, or SIGTERM. The action in progress is
the last one; the rest are rejected (`not_leader`, `shutting_down`), counted and audited, never applied."""

from __future__ import annotations

import io
import json
import threading

import pytest
from loop_helpers import make_fleet, snapshot
from prometheus_client import CollectorRegistry

from balancer.actuate.base import ActionResult, Outcome
from balancer.loop import InMemoryLeaderElector, InMemoryLease, JsonlAudit, NullLeaderElector, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Plan, TaintNode

SNAP = snapshot(make_fleet(3, 4), age=0.0)
ACTIONS = tuple(TaintNode(node=f"n{i}", reason="hot", expected_gain=1.0) for i in range(3))


class Clock:
    def __init__(self) -> None:
        self.now = SNAP.time

    def __call__(self) -> float:
        return self.now


class Source:
    """The same snapshot every time; `during_read()` runs inside the next read (a read that takes long)."""

    def __init__(self) -> None:
        self.during_read = None
        self.reads = 0

    def snapshot(self):
        self.reads += 1
        hook, self.during_read = self.during_read, None
        if hook is not None:
            hook()
        return SNAP


class Actuator:
    """Applies everything; `during_apply(n)` runs inside the n-th apply (an action that takes long)."""

    name = "test"

    def __init__(self, during_apply=lambda n: None) -> None:
        self.calls, self.during_apply, self.housekeeping_calls = [], during_apply, 0

    def apply(self, action, snap):
        self.calls.append(action)
        self.during_apply(len(self.calls))
        return ActionResult(action, Outcome.APPLIED)

    def housekeeping(self):
        self.housekeeping_calls += 1
        return []


def replica(clock, elector, actuator, source=None, audit=None):
    registry = CollectorRegistry()
    rec = Reconciler(source=source or Source(), actuator=actuator, clock=clock, elector=elector,
                     metrics=ControllerMetrics(registry), audit=audit,
                     planner=lambda snap, forecasts, policy, state: (Plan(actions=ACTIONS), state))
    return rec, registry


def rejected(registry, reason):
    return registry.get_sample_value("gputide_actions_rejected_total", {"reason": reason})


def audited(out: io.StringIO) -> list[tuple[str, str]]:
    return [(r["target"], r["outcome"]) for r in map(json.loads, out.getvalue().splitlines())]


def test_a_replica_whose_lease_is_taken_over_during_an_action_applies_no_further_action():
    clock, lease = Clock(), InMemoryLease(duration_s=90.0)
    b = InMemoryLeaderElector(lease, "b")
    holders = []

    def slow_first_action(n):
        holders.append(lease.holder)
        if n == 1:   # the call takes 100 s: a's Lease expires and b takes it over meanwhile
            clock.now += 100
            assert b.try_acquire(clock.now)

    out = io.StringIO()
    actuator = Actuator(slow_first_action)
    a, reg = replica(clock, InMemoryLeaderElector(lease, "a"), actuator, audit=JsonlAudit(out))
    report = a.run_once()
    assert actuator.calls == [ACTIONS[0]] and holders == ["a"]
    assert report.rejected == [(ACTIONS[1], "not_leader"), (ACTIONS[2], "not_leader")]
    assert rejected(reg, "not_leader") == 2 and rejected(reg, "shutting_down") == 0
    assert audited(out)[-2:] == [("n1", "rejected:not_leader"), ("n2", "rejected:not_leader")]
    # demoted: it reports itself standby and no longer the fleet it saw as leader
    assert reg.get_sample_value("gputide_leader", {"lease": ""}) == 0
    assert reg.get_sample_value("gputide_capacity_gpus", {"class": "idle"}) == 0
    assert lease.holder == "b" and a.run_once().status == "standby"


def test_a_lease_lost_while_reading_telemetry_leaves_housekeeping_and_acting_to_the_new_leader():
    clock, lease = Clock(), InMemoryLease(duration_s=90.0)
    b = InMemoryLeaderElector(lease, "b")
    source, actuator = Source(), Actuator()
    a, reg = replica(clock, InMemoryLeaderElector(lease, "a"), actuator, source=source)

    def slow_read():   # Prometheus answers after 100 s; b takes the Lease over meanwhile
        clock.now += 100
        assert b.try_acquire(clock.now)

    source.during_read = slow_read
    report = a.run_once()
    assert (report.status, report.reason) == ("standby", "lost the Lease while reading telemetry")
    assert actuator.calls == [] and actuator.housekeeping_calls == 0
    assert reg.get_sample_value("gputide_leader", {"lease": ""}) == 0


def test_a_lease_lost_while_taking_the_fresh_snapshot_before_acting_applies_nothing():
    clock, lease = Clock(), InMemoryLease(duration_s=90.0)
    b = InMemoryLeaderElector(lease, "b")
    source, actuator = Source(), Actuator()
    a, reg = replica(clock, InMemoryLeaderElector(lease, "a"), actuator, source=source)

    def first_read():
        def fresh_read():   # the second read, just before acting, is the slow one
            clock.now += 100
            assert b.try_acquire(clock.now)
        source.during_read = fresh_read

    source.during_read = first_read
    report = a.run_once()
    assert source.reads == 2 and actuator.calls == []
    assert [why for _, why in report.rejected] == ["not_leader"] * 3 and rejected(reg, "not_leader") == 3


def test_a_replica_that_keeps_its_lease_applies_every_action_and_renews_before_each():
    clock, lease = Clock(), InMemoryLease(duration_s=90.0)
    renewed = []

    def slow(n):   # each action takes 60 s: the Lease would lapse within the cycle were it not renewed
        renewed.append(lease.renewed_at)
        clock.now += 60

    actuator = Actuator(slow)
    a, reg = replica(clock, InMemoryLeaderElector(lease, "a"), actuator)
    report = a.run_once()
    assert actuator.calls == list(ACTIONS) and report.rejected == []
    assert renewed == [SNAP.time, SNAP.time + 60, SNAP.time + 120]
    assert reg.get_sample_value("gputide_leader", {"lease": ""}) == 1


@pytest.mark.parametrize("elector", [
    pytest.param(lambda: NullLeaderElector(), id="a single replica"),
    pytest.param(lambda: InMemoryLeaderElector(InMemoryLease(duration_s=90.0), "a"), id="a replica with a Lease"),
])
def test_sigterm_during_an_action_finishes_it_skips_the_rest_and_ends_the_loop(elector):
    clock, stop = Clock(), threading.Event()
    out = io.StringIO()
    actuator = Actuator(lambda n: stop.set())   # the signal handler runs while the first action is applied
    a, reg = replica(clock, elector(), actuator, audit=JsonlAudit(out))
    a.run(30.0, stop)   # returns: without the stop it would loop for ever
    assert actuator.calls == [ACTIONS[0]]
    assert rejected(reg, "shutting_down") == 2 and rejected(reg, "not_leader") == 0
    assert audited(out)[-2:] == [("n1", "rejected:shutting_down"), ("n2", "rejected:shutting_down")]
    assert reg.get_sample_value("gputide_leader", {"lease": ""}) == 0


def test_sigterm_releases_the_lease_so_a_standby_takes_over_at_once():
    clock, stop, lease = Clock(), threading.Event(), InMemoryLease(duration_s=90.0)
    b = InMemoryLeaderElector(lease, "b")
    a, _ = replica(clock, InMemoryLeaderElector(lease, "a"), Actuator(lambda n: stop.set()))
    a.run(30.0, stop)
    assert lease.holder is None
    assert b.try_acquire(clock.now), "no waiting for the lease to expire"
