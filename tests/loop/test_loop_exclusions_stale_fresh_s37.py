"""`gputide_migration_exclusions` counts a cycle's refusals however the cycle ends. A cycle whose fresh snapshot
before acting is stale holds (fail-static) after the guard's review has refused a move; the refusal is in the
planner's state, yet the gauge was set at the cycle's end only, so it read the last cycle's count (review s37r4)."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry
from reads_down import ReadsDown

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import InMemoryLeaderElector, InMemoryLease, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.safety import SafetyLedger

FL = make_fleet(3, 4)
T0 = 1000.0


def down_after(clock: list[float]) -> ReadsDown:
    """web-0 on a hot GPU of n0."""
    return ReadsDown(clock, lambda now: snapshot(FL, workloads=[(workload("web-0", owner="web"), (0,))], temps={0: 86},
                                                 time=now))


class Live:
    name = "live"

    def apply(self, action, snap):
        return ActionResult(action, Outcome.APPLIED)


def test_a_cycle_held_on_a_stale_fresh_snapshot_still_counts_its_refusals():
    """svc-y's move to n1 settles until T0+50 (one migration a node): at T0+10 the planner taints n0 and moves web-0
    to n1; the guard refuses the move (n1 full) and accepts the taint, and the fresh read before acting fails."""
    clock, registry = [T0], CollectorRegistry()
    source = down_after(clock)
    rec = Reconciler(source=source, actuator=Live(), clock=lambda: clock[0], metrics=ControllerMetrics(registry),
                     policy=BalancerPolicy(safety=SafetyPolicy(max_concurrent_migrations_per_node=1)))
    rec.ledger = SafetyLedger(migrations=((T0 - 10.0, "n2", "n1", "svc-y"),))
    assert rec.run_once().status == "ok"   # one hot reading: nothing planned yet
    clock[0], source.reads_left = T0 + 10.0, 1   # the planning read answers, the fresh one does not
    report = rec.run_once()
    assert (report.status, report.reason) == ("fail_static", "telemetry_unavailable"), report
    assert set(rec.state.refused_targets) == {("inference/web-0", "n1")}
    assert registry.get_sample_value("gputide_migration_exclusions", {"scope": "target"}) == 1   # before: 0


def test_a_replica_that_lost_the_lease_mid_cycle_no_longer_counts_its_refusals():
    """The same refusal at T0+10, the fresh read taking 100 s while replica b takes the Lease over: a is demoted
    before acting (`ControllerMetrics.standby` zeroes the gauge), and the gauge stays at 0 on a replica that does not
    lead. Before, the cycle set it again at its end, and the standby reported the refusal until it led again."""
    clock, registry, lease = [T0], CollectorRegistry(), InMemoryLease(duration_s=90.0)
    source = down_after(clock)
    rec = Reconciler(source=source, actuator=Live(), clock=lambda: clock[0], metrics=ControllerMetrics(registry),
                     elector=InMemoryLeaderElector(lease, "a"),
                     policy=BalancerPolicy(safety=SafetyPolicy(max_concurrent_migrations_per_node=1)))
    rec.ledger = SafetyLedger(migrations=((T0 - 10.0, "n2", "n1", "svc-y"),))
    rec.run_once()
    clock[0] = T0 + 10.0
    reads = [0]

    def slow_fresh_read():
        reads[0] += 1
        if reads[0] == 2:   # the fresh read: a's Lease expires, b takes it over
            clock[0] += 100.0
            assert InMemoryLeaderElector(lease, "b").try_acquire(clock[0])

    source.during_read = slow_fresh_read
    report = rec.run_once()
    assert [why for _, why in report.rejected] == ["max_concurrent_migrations", "not_leader"], report.rejected
    assert registry.get_sample_value("gputide_leader", {"lease": ""}) == 0
    assert registry.get_sample_value("gputide_migration_exclusions", {"scope": "target"}) == 0   # before: 1
