"""A cycle that begins as a standby leaves `gputide_eviction_budget_remaining` as it was (`Reconciler._cycle`,
`ControllerMetrics.standby`): the gauge is set at the end of every cycle that began as leader (`_show_budget`), never
by a standby, which reads nothing and whose series the alerts skip. Set there, a standby's gauge would move with its
own copy of the ledger (an eviction leaving its window), not with the budget the leader spends; cleared (0), it would
read as exhausted and page GputideEvictionBudgetExhausted for a replica that acts on nothing."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.safety import SafetyLedger

FL = make_fleet(3, 4)
T0 = 1000.0
POLICY = BalancerPolicy(safety=SafetyPolicy(eviction_budget=3, eviction_window_s=600.0))


class Elector:
    """Leads while `leads`; no Lease to hand a ledger over."""

    def __init__(self) -> None:
        self.leads = True

    def try_acquire(self, now: float) -> bool:
        return self.leads

    def release(self) -> None:
        pass


class Live:
    name = "live"

    def apply(self, action, snap):
        return ActionResult(action, Outcome.APPLIED)


def gauge(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("gputide_eviction_budget_remaining")


def reconciler(elector: Elector, clock: list[float]) -> tuple[Reconciler, CollectorRegistry]:
    registry = CollectorRegistry()
    source = type("Source", (), {"snapshot": lambda self: snapshot(
        FL, workloads=[(workload("web-0", owner="web"), (0,))], time=clock[0])})()
    rec = Reconciler(source=source, actuator=Live(), clock=lambda: clock[0], policy=POLICY, elector=elector,
                     metrics=ControllerMetrics(registry))
    return rec, registry


def test_a_demoted_replicas_standby_cycles_leave_the_gauge_as_its_last_led_cycle_set_it() -> None:
    """An eviction at T0-595 leaves its 600 s window at T0+5: led at T0, the gauge reads 2; demoted, the standby cycles
    at T0+10 and T0+20 leave it at 2 (recomputed there it would read 3; cleared, 0)."""
    elector, clock = Elector(), [T0]
    rec, registry = reconciler(elector, clock)
    rec.ledger = SafetyLedger(evictions=(T0 - 595.0,))
    assert rec.run_once().status == "ok"
    assert gauge(registry) == 2
    elector.leads = False
    for clock[0] in (T0 + 10.0, T0 + 20.0):
        report = rec.run_once()
        assert (report.status, report.reason) == ("standby", "not the leader")
        assert gauge(registry) == 2
    elector.leads = True   # led again: the gauge is the leader's number once more
    clock[0] = T0 + 30.0
    assert rec.run_once().status == "ok"
    assert gauge(registry) == 3


def test_a_replica_that_never_led_keeps_the_gauge_it_started_with() -> None:
    """A replica standing by from its start shows the whole budget it was built with (`Reconciler.__init__`), whatever
    its ledger holds meanwhile: its standby cycles neither count that ledger nor zero the gauge."""
    elector, clock = Elector(), [T0]
    elector.leads = False
    rec, registry = reconciler(elector, clock)
    assert gauge(registry) == 3
    rec.ledger = SafetyLedger(evictions=(T0 - 5.0, T0 - 4.0))
    for clock[0] in (T0, T0 + 10.0):
        assert rec.run_once().status == "standby"
        assert gauge(registry) == 3
