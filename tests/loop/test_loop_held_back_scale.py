"""A capacity scale the hand-over holds back (a loan that stops placed replicas: the safety ledger with its evictions
could not be saved for a successor, `LedgerHandover.review` rejects it as `eviction_budget`) is no refusal of the
guard's: like a held-back move (tests/loop/test_loop_held_back_move.py) it waits as made only while the ledger stays
unsaved (`planner.held_scales`); the next cycle whose start saves the ledger plans and sends it. Before, it was
counted among the guard's lasting refusals and waited as made (`Reconciler._unsent`): the service's hold
(`minHoldS`, 30 minutes) though the ledger was saved a cycle later.

The fleet: chat, three replicas placed on GPUs 0-2 of a 2x4 fleet, 5 req/s (one replica's worth, 10 req/s each) and
forecast to stay there: once its hold from its first sighting (T0) has passed, at T0+1800 s, the tide lends two of
its replicas to training, which the hand-over holds back while the Lease cannot be written (`Store.down`)."""

from __future__ import annotations

from functools import partial

import numpy as np
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer import config
from balancer.ledger_handover import LedgerHandover
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Forecast, ScaleInference, ServiceStatus
from balancer.plan import planner
from balancer.plan.capacity import CapacityPolicy, CapacityState, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from tests.loop.test_loop_held_back_move import Sent, Store

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
FL = make_fleet(2, 4)
T0 = 1000.0
HOLD = CapacityPolicy().min_hold_s


def chat(now: float):
    services = {"chat": ServiceStatus(name="chat", demand_rps=5.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=3)}
    return snapshot(FL, workloads=[(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(3)], time=now,
                    services=services)


def calm(snap):
    return {"chat": Forecast(service="chat", issued_at=snap.time, step_s=600.0,
                             quantiles={q: np.full(24, 5.0) for q in (0.5, 0.9, 0.99)})}


class Source:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def snapshot(self):
        return chat(self.clock[0])


def loans(actions) -> list[int]:
    return [a.replicas for a in actions if isinstance(a, ScaleInference) and a.replicas < a.previous_replicas]


def held_back() -> tuple[Reconciler, Store, Sent, list[float], CollectorRegistry]:
    """The reconciler after its cycles at T0, T0+60 and T0+HOLD, chat's loan held back at the last; the clock 10 s
    later."""
    clock, registry, store, actuator = [T0], CollectorRegistry(), Store(), Sent()
    profiles = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}
    rec = Reconciler(source=Source(clock), actuator=actuator, clock=lambda: clock[0], policy=ON, forecaster=calm,
                     metrics=ControllerMetrics(registry),
                     planner=partial(plan_with_capacity, profiles=profiles, capacity_policy=CapacityPolicy()))
    rec.handover = LedgerHandover(store, registry)
    for t in (T0, T0 + 60.0):   # watched, within its hold: nothing lent
        clock[0] = t
        assert not loans(rec.run_once().plan.actions)
    clock[0], store.down = T0 + HOLD, True
    report = rec.run_once()
    assert loans(report.plan.actions) == [1]
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "eviction_budget")]
    assert not actuator.sent
    clock[0] = T0 + HOLD + 10.0
    return rec, store, actuator, clock, registry


def test_a_loan_held_back_goes_the_next_cycle_once_the_ledger_is_saved() -> None:
    rec, store, actuator, _, _ = held_back()
    store.down = False
    report = rec.run_once()
    assert loans(report.plan.actions) == [1] and not report.rejected, report
    assert loans(actuator.sent) == [1]   # before: none until the service's hold (30 minutes) had passed again
    assert '"chat"' in store.saved   # its cooldown in the ledger a successor inherits
    assert not rec.state.held_scales


def test_a_loan_held_back_while_the_ledger_stays_unsaved_waits_and_says_why() -> None:
    """While the Lease still cannot be written nothing is lent (not planned again each cycle either: one rejection),
    each failed save counted; once saved, the loan goes."""
    rec, store, actuator, clock, registry = held_back()
    for _ in range(2):
        report = rec.run_once()
        assert report.status == "ok" and not loans(report.plan.actions) and not report.rejected, report
        clock[0] += 10.0
    assert not actuator.sent
    assert registry.get_sample_value("gputide_actions_rejected_total", {"reason": "eviction_budget"}) == 1
    assert registry.get_sample_value("gputide_ledger_write_failures_total", {"reason": "error"}) >= 3
    store.down = False
    rec.run_once()
    assert loans(actuator.sent) == [1]   # before: kept as made for the service's whole hold


def test_ledger_saved_puts_back_only_what_a_held_scale_set() -> None:
    """A service changed since the scale was held (a later change went out) keeps its memory; one with no change known
    before the held scale is held from its first sighting again, as `capacity_loop.unsent` keeps it."""
    down = [ScaleInference(service=s, replicas=1, previous_replicas=3, reason="loan", expected_gain=1.0)
            for s in ("chat", "embed", "new")]
    before = planner.PlannerState(capacity=CapacityState(last_change={"chat": 100.0, "embed": 200.0},
                                                         first_seen={"new": 50.0}))
    planned = planner.replace(before, capacity=CapacityState(last_change={"chat": T0, "embed": T0, "new": T0}))
    state = planner.hold_back(planned, down, T0, before)
    assert set(state.held_scales) == {"chat", "embed", "new"} and not state.refused_moves
    state = planner.replace(state, capacity=planner.replace(state.capacity, last_change={
        **state.capacity.last_change, "embed": T0 + 60.0}))   # embed changed again since
    cap = planner.ledger_saved(state).capacity
    assert dict(cap.last_change) == {"chat": 100.0, "embed": T0 + 60.0}
    assert dict(cap.first_seen) == {"new": 50.0}
    assert not planner.ledger_saved(state).held_scales
    assert planner.ledger_saved(planned) is planned
