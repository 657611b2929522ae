"""`gputide_eviction_budget_remaining` is set at the end of every cycle that began as leader, however it ends
(`Reconciler._show_budget`). It was set only once a cycle got through (and on taking office), so a cycle held
fail-static (on its first read, or on the fresh one before acting), held for an emergency stop, or ended by an actuator
that raised left the number of an earlier cycle: an eviction that had left its window still counted (a long hold read
exhausted after the window rolled over), and one an actuator that raised had spent (`_settle`) not yet."""

from __future__ import annotations

from dataclasses import replace

import pytest
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry
from reads_down import ReadsDown

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Migrate
from balancer.safety import SafetyLedger

FL = make_fleet(3, 4)
T0 = 1000.0
POLICY = BalancerPolicy(safety=SafetyPolicy(eviction_budget=3, eviction_window_s=600.0))


def hot_web(now: float):
    """web-0 on a hot GPU of n0: the planner moves it to n1 at its second hot reading."""
    return snapshot(FL, workloads=[(workload("web-0", owner="web"), (0,))], temps={0: 86}, time=now)


class Live:
    """Applies everything; a migration raises when `raises` (a transport error past the actuator's own handling)."""

    name = "live"

    def __init__(self) -> None:
        self.raises = False

    def apply(self, action, snap):
        if self.raises and isinstance(action, Migrate):
            raise ConnectionError("apiserver went away")
        return ActionResult(action, Outcome.APPLIED)


def reconciler(ledger: SafetyLedger) -> tuple[Reconciler, ReadsDown, Live, list[float], CollectorRegistry]:
    """A reconciler after one cycle at T0 (one hot reading: nothing planned) from `ledger`; the clock then at T0+10."""
    clock, registry = [T0], CollectorRegistry()
    source, actuator = ReadsDown(clock, hot_web), Live()
    rec = Reconciler(source=source, actuator=actuator, clock=lambda: clock[0], policy=POLICY,
                     metrics=ControllerMetrics(registry))
    rec.ledger = ledger
    assert rec.run_once().status == "ok"
    clock[0] = T0 + 10.0
    return rec, source, actuator, clock, registry


def gauge(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("gputide_eviction_budget_remaining")


@pytest.mark.parametrize("hold", ["first_read", "fresh_read", "emergency_stop"])
def test_a_held_cycle_shows_the_evictions_that_left_the_window_while_it_held(hold: str) -> None:
    """An eviction at T0-595 leaves its 600 s window at T0+5: the cycle at T0 shows 2 left, a held one at T0+10 all 3
    (before: 2, an earlier cycle's number). `fresh_read`: the planning read answers and the review accepts web-0's
    move, the read before acting does not."""
    rec, source, _, _, registry = reconciler(SafetyLedger(evictions=(T0 - 595.0,)))
    assert gauge(registry) == 2
    if hold == "emergency_stop":
        rec.guard.policy = replace(rec.guard.policy, emergency_stop=True)
    else:
        source.reads_left = 0 if hold == "first_read" else 1
    report = rec.run_once()
    assert report.status == "fail_static", report
    assert report.reason == ("emergency_stop" if hold == "emergency_stop" else "telemetry_unavailable")
    assert gauge(registry) == 3   # before: 2


def test_a_cycle_whose_actuator_raised_shows_the_eviction_it_spent() -> None:
    """web-0's move raises at T0+10: its outcome unknown, the ledger spends its eviction (`_settle`), and the gauge
    shows 2 left (before: 3, as if nothing had been spent, until a cycle got through)."""
    rec, _, actuator, _, registry = reconciler(SafetyLedger())
    assert gauge(registry) == 3
    actuator.raises = True
    with pytest.raises(ConnectionError):
        rec.run_once()
    assert len(rec.ledger.evictions) == 1
    assert gauge(registry) == 2   # before: 3
