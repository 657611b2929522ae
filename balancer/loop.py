"""The reconcile loop: observe -> forecast -> plan -> simulate -> safety -> act -> record.

`Reconciler` wires injected parts together; it owns no I/O of its own:

* `source`      a TelemetrySource; any TelemetryError means *hold still* (fail-static), reported in the metrics
                (`gputide_fail_static`, `gputide_fail_static_info{reason}`), the log and the audit log; so does any
                other exception raised while reading it (reason `telemetry_error`, logged with its traceback);
* `forecaster`  optional `forecast(snapshot) -> {service: Forecast}`; a failing forecaster is logged and skipped, a
                forecast the capacity planner cannot read left out of the plan and the gauges alike;
* `planner`     `plan(snapshot, forecasts, policy, state) -> (Plan, state)`, pure; it already simulates its
                proposals on a projection and drops those that do not help or do not fit;
* `guard`       the safety chokepoint (`balancer.safety.SafetyGuard`); its ledger counts the actions applied and
                those that may have been (`ActionResult.maybe_applied`: a write got no answer), never told to the
                planner as done; a dry run's too, in a what-if ledger of its own that is never handed on (`_WhatIf`);
* `actuator`    sim, dry-run or Kubernetes; dry-run is just another actuator;
* `elector`     leader election (`balancer.actuate.leader`): only the leader acts (a standby replica observes
                nothing and says so); asked again after the telemetry read and before every action, it stops
                a cycle that outlived its Lease (the rest skipped as `not_leader`). Each time this replica takes
                the lead (its first time, or again after another replica led: the elector's `terms` count, where
                it keeps one, tells a lead lost and retaken between two asks) it starts as a new process would:
                see `_take_office`;
* `audit`       JSON lines: time, action, target, reason, expected gain, outcome (`balancer.audit.JsonlAudit`);
* `clock`       seconds; the only notion of time.

`run(interval, stop)` also checks `stop` (SIGTERM) before every action: the action in progress is finished, the
rest are skipped (`shutting_down`), and the Lease is released on the way out.

The loop is level-triggered: every cycle re-derives what to do from the fleet as it is now, so a restart, a
lost action or a duplicate cycle converges to the same place. Before acting, accepted actions are re-validated
against a fresh snapshot (drop any whose source moved or whose target no longer fits, or that an emergency stop the
fresh snapshot shows holds), and an emergency stop set while earlier actions ran holds the rest. What was carried out
goes into the safety ledger, at the time it was done, whatever ends the cycle after it (`_settle`), and the ledger
goes from leader to leader (`balancer.ledger_handover`); a move or a capacity scale the hand-over held back, that
ledger unsaved, is kept off only until it is saved (`planner.hold_back`), not refused (`HeldForLedger`); a training
growth into the GPUs of a loan goes only once that loan came back applied or a dry run's, else it is rejected
(`group_incomplete`): the loan held back or refused by the review, dropped on the fresh snapshot, or failed (`_act`,
`_on_loans`: the plan orders loans before growths, `capacity_pools.apply_targets`), its workers on GPUs idle already
sent alone (`_reduced`) unless a loan that did not go was held back for the ledger (it goes next cycle) or may
have been applied (its outcome unknown). A capacity scale up that did not go out, or a reclaim shrink that frees GPUs
for a latency-net step, is told to the planner as never proposed where its cause passes (`_unsent`: an emergency
stop, a stale plan, an interrupted cycle; a lasting refusal of the guard is waited out as if made, and refused too,
`planner.refuse`). What its actions leave on the fleet the actuator keeps up or releases (hooks `recover()`,
`housekeeping()`, `keep_power_caps()`): when, under which holds, is `balancer.loop_upkeep`.

An inference service whose demand is unknown (`ClusterSnapshot.demand_unknown`: a stalled vLLM pod) is no hold of
the loop's: the capacity planner holds (`gputide_capacity_holding{reason="inference_demand_unknown"}`), thermal relief
goes on, and the loop logs the services and why each time their set changes, saying which of them capacity holds
for (`PlannerState.demand_held`: the profiled ones, one with no serving series at all while its pods run among them)
(`_log_demand_unknown`).

Every planning cycle also records what the fleet looks like (`balancer.fleet_record.FleetRecorder`); a hold
reports no forecast and the fleet unknown (`FleetRecorder.hold`). A failure while recording is logged and never stops
the loop.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, TypeGuard

from balancer.actions import Action, Migrate, Plan, ScaleTraining
from balancer.actuate.base import ActionResult, Actuator, Outcome, Refused
from balancer.actuate.leader import (  # noqa: F401  (InMemory*: re-exported, imported from here by soak and tests)
    InMemoryLeaderElector,
    InMemoryLease,
    LeaderElector,
    NullLeaderElector,
)
from balancer.audit import JsonlAudit, action_record, reason_label
from balancer.config import BalancerPolicy
from balancer.errors import SafetyViolation, TelemetryError
from balancer.fleet_record import FleetRecorder
from balancer.ledger_handover import HeldForLedger, LedgerHandover
from balancer.loop_upkeep import LoopUpkeep
from balancer.metrics import NOT_LEADER, SHUTTING_DOWN, STALE_PLAN, TELEMETRY_ERROR, ControllerMetrics
from balancer.model import ClusterSnapshot, Forecast, ScaleInference
from balancer.plan import capacity_loop
from balancer.plan import planner as planner_mod
from balancer.plan.capacity_plan import readable_forecasts
from balancer.plan.simulate import Projection
from balancer.safety import (
    EmergencyStop,
    MaxConcurrentMigrations,
    Review,
    SafetyGuard,
    SafetyLedger,
    check_telemetry,
)
from balancer.safety_groups import GroupIncomplete, whole_groups
from balancer.telemetry.base import TelemetrySource

log = logging.getLogger(__name__)
KEEP_DURATIONS = 1000   # cycle durations a Reconciler keeps by default (`reconcile_seconds`)


class StalePlan(SafetyViolation):
    reason = STALE_PLAN
    of = staticmethod(lambda why: None if why is None else StalePlan(why))   # `Projection.apply`'s refusal, if any


@dataclass
class CycleReport:
    status: str                       # ok | fail_static | standby | error
    reason: str = ""
    plan: Plan | None = None
    results: list[ActionResult] = field(default_factory=list)
    rejected: list[tuple[Action, str]] = field(default_factory=list)
    duration_s: float = 0.0


def _refused_scale(result: ActionResult) -> bool:
    """Whether `result` is a service's scaling that the actuator failed for good, having changed nothing (FAILED: a
    Deployment another controller keeps, an HPA KEDA generates, RBAC; or refused, `ActionResult.refused`): the
    capacity planner leaves the service alone for a while (`planner.refuse`, "Refused scales"). A RETRY (409, 5xx,
    no answer) is not remembered: a scale-up is asked again next cycle, a scale-down (a loan) after the service's hold
    (`capacity_loop.unsent`)."""
    return isinstance(result.action, ScaleInference) and not result.maybe_applied and (
        result.outcome == Outcome.FAILED or result.refused is not None)


def _guard_refusals(rejected: Iterable[tuple[Action, SafetyViolation]]
                    ) -> tuple[list[Action], list[Action]]:
    """The guard's refusals as `planner.refuse` takes them: the actions whose workloads are not moved for a while,
    and the moves kept off nodes only (`targets`, each kept off only while the guard counts its node full:
    `refuse(..., guard=True)`). One refused for its target node alone (`MaxConcurrentMigrations.target_only`) is kept
    off its target and every node that replacements still landing past `migrationSettleS` alone hold at the limit
    (`full_nodes`), one move per node: the planner does not count migrations in flight, and kept off its target alone
    the pod was proposed the next-best full node each cycle, one refused per cycle, its hot GPU throttled only once all
    had been. Those nodes free when the replacements land, which the planner does not see either: the loop asks the
    guard each cycle (`planner.still_full`; at its end too when the review kept a move off a full node: `_unfilled`),
    and kept off for `refusedTargetRetryS` the pod was throttled or sent to a worse node for ten minutes when one
    landed a minute later. The target itself is marked too: full only with migrations settling, it frees within
    `migrationSettleS`, and once the guard no longer counts it full the pod may go there again. Left unmarked, it was
    taken for the actuator's refusal (`planner.refuse`): kept off for `refusedTargetRetryS`, and still so when a later
    refusal named it full (`full_nodes`), its ten minutes restarted."""
    whole: list[Action] = []
    nodes: list[Action] = []
    for a, exc in rejected:
        if isinstance(a, Migrate) and isinstance(exc, MaxConcurrentMigrations) and exc.target_only:
            nodes += [replace(a, target_node=n) for n in sorted(exc.full_nodes | {a.target_node})]
        else:
            whole.append(a)
    return whole, nodes


def _on_loans(a: Action, gone: set[str]) -> TypeGuard[ScaleTraining]:
    """Whether `a` is a training growth into GPUs that a loan (scale-down) of a service not in `gone` frees: the plan
    names such a growth's loans (`ScaleTraining.service`, `capacity_pools.Pools.training_actions`). Sent before its
    loans went (`gone`: came back applied, or a dry run's), its workers wait pending on GPUs the service keeps (until
    the ledger is saved, or the service's hold has passed). Nothing of it is remembered: the next plan grows into what
    is idle then, and into the loan's GPUs with the loan once it goes. A growth onto idle GPUs alone names no loan and
    goes."""
    return (isinstance(a, ScaleTraining) and a.cause == "loan" and a.workers > a.previous_workers
            and not _loans(a) <= gone)


def _loans(a: ScaleTraining) -> set[str]:
    """The services whose loans a tide growth grows into (`ScaleTraining.service`, comma-separated)."""
    return set(filter(None, a.service.split(",")))


def _idle_workers(a: ScaleTraining, min_gain: float, waiting: set[str]) -> int:
    """The workers of a growth into the GPUs of loans (`_on_loans`) that go without them (`_reduced`): those GPUs idle
    already hold (`ScaleTraining.idle_workers`, the plan's count), where alone they meet the guard's minimum gain
    (`min_gain`, `safety.minExpectedGain`) and none of its loans is `waiting`: held back for the ledger
    (`HeldForLedger`), it goes the next cycle the ledger is saved, the growth whole with it (its idle part sent alone
    now, the job's own cooldown, `safety.cooldownS`, then refused the growth into the loan's GPUs, idle for up to that
    cooldown); come back with its outcome unknown (`ActionResult.maybe_applied`), it may have freed its GPUs, and the
    next plan sees. Else none. A loan refused by the review, dropped on the fresh snapshot, come back RETRY or FAILED
    (nothing changed) does not go next cycle: a scale-down not sent waits out the service's hold
    (`capacity_loop.unsent`, `CapacityPolicy.min_hold_s`), and the growth's idle part goes now, the rest with the loan
    then."""
    return a.idle_workers if a.idle_gain >= min_gain and not _loans(a) & waiting else 0


def _sends_nothing(a: Action, min_gain: float, waiting: set[str]) -> bool:
    """Whether `a` goes only with loans (`_on_loans`), no part of it onto GPUs idle already that may go without them
    (`_idle_workers`, `waiting`: the loans held back for the ledger; an accepted loan makes the cycle send something
    anyway): without its loans, nothing of it is sent. A cycle whose actions all send nothing reads no fresh
    snapshot: read, and failing, it held fail-static a cycle that acts on nothing, its rejections unrecorded."""
    return _on_loans(a, set()) and not _idle_workers(a, min_gain, waiting)


def _reduced(a: ScaleTraining, part: int) -> ScaleTraining:
    """A growth into the GPUs of loans that did not go (`_on_loans`) reduced to its `part` of workers on GPUs idle
    already (`_idle_workers`, the plan's count `ScaleTraining.idle_workers`) and their gain alone (`idle_gain`), no
    loan named. Rejected whole, a growth onto an idle GPU and a loan refused or failed left the idle GPU idle for a
    cycle; the loan's part waits for the next plan, which grows into the loan's GPUs once the loan goes."""
    return replace(a, workers=a.previous_workers + part, expected_gain=a.idle_gain, service="", idle_workers=0,
                   idle_gain=0.0, reason=f"{a.reason}; reduced to +{part} on GPUs idle already: the loan of "
                   f"{a.service} it also grows into did not go")


def _is_loan(a: Action) -> TypeGuard[ScaleInference]:
    return isinstance(a, ScaleInference) and a.replicas < a.previous_replicas


class _WhatIf:
    """`guard` as a dry run's hand-over review sees it (`LedgerHandover.review`, `remaining_evictions`): restrained by
    `what_if`, the ledger with what the dry run answered DRY_RUN as if applied (`Reconciler._settle`), so its audit
    log and metrics show what a live run would do: each migration once, not every cycle, the eviction budget, the
    cooldowns, `maxConcurrentMigrationsPerNode` and `maxUnavailablePerWorkload` spent as a live run spends them.
    Yet nothing it records reaches a successor: `record` adds none of the accepted actions, so the review saves no
    reservation (a dry run evicts nothing: none is needed), and the ledger a dry run hands on (the Lease, the
    --ledger-file) is the one it inherited, as before. A live leader after a dry run would otherwise find budgets
    spent and cooldowns running for actions never taken, and act less."""

    def __init__(self, guard: SafetyGuard, what_if: SafetyLedger) -> None:
        self.guard, self.what_if = guard, what_if

    @property
    def policy(self) -> Any:
        return self.guard.policy

    def review(self, actions: Iterable[Action], snapshot: ClusterSnapshot, ledger: SafetyLedger, now: float) -> Review:
        return self.guard.review(actions, snapshot, ledger.merged(self.what_if), now)

    def remaining_evictions(self, ledger: SafetyLedger, now: float) -> int:
        return self.guard.remaining_evictions(ledger.merged(self.what_if), now)

    def full_nodes(self, snapshot: ClusterSnapshot, ledger: SafetyLedger, now: float) -> frozenset[str]:
        return self.guard.full_nodes(snapshot, ledger.merged(self.what_if), now)

    def record(self, ledger: SafetyLedger, applied: Iterable[Action], snapshot: ClusterSnapshot,
               now: float) -> SafetyLedger:
        return self.guard.record(ledger, (), snapshot, now)


class Reconciler:
    def __init__(self, *, source: TelemetrySource, actuator: Actuator, policy: BalancerPolicy | None = None,
                 guard: SafetyGuard | None = None, clock: Callable[[], float] = time.time,
                 forecaster: Callable[[ClusterSnapshot], Mapping[str, Forecast]] | None = None,
                 elector: LeaderElector | None = None, metrics: ControllerMetrics | None = None,
                 audit: JsonlAudit | None = None, planner: Callable[..., tuple[Plan, Any]] = planner_mod.plan,
                 policy_source: Callable[[], BalancerPolicy | None] | None = None,
                 keep_durations: int | None = KEEP_DURATIONS) -> None:
        self.policy = policy or BalancerPolicy()
        self.policy_source = policy_source
        self.source, self.actuator, self.clock = source, actuator, clock
        self.guard = guard or SafetyGuard(self.policy.safety)
        self.forecaster, self.audit, self.planner = forecaster, audit, planner
        self.elector = elector or NullLeaderElector()
        self.metrics = metrics or ControllerMetrics()
        self.state = planner_mod.PlannerState()
        self.ledger = SafetyLedger()
        self.what_if = SafetyLedger()   # a dry run's ledger: `ledger` and what it answered DRY_RUN (`_WhatIf`)
        # a fresh controller has its whole eviction budget; 0 here would page GputideEvictionBudgetExhausted
        self.metrics.eviction_budget.set(self.guard.remaining_evictions(self.ledger, self.clock()))
        self.handover = LedgerHandover(self.elector, self.metrics.registry)   # the ledger, leader to leader
        self._last_notes: frozenset[str] = frozenset()  # the planner's notes last cycle (logged once each)
        # the services whose demand was unknown last reading, and those the capacity planner held for
        self._demand_unknown: tuple[frozenset[str], frozenset[str]] = (frozenset(), frozenset())
        self._leading = False
        self._term: object = None   # the elector's `terms` when this replica last took the lead
        self._offices = 0           # times this replica took the lead: a cycle stops when it changes under it
        self._cycle_office = 0      # ... its value when this cycle began
        self.fleet = FleetRecorder(self.metrics)   # what the fleet looks like, into the metrics, each planned cycle
        self._stop = threading.Event()   # `run`'s: once set, no further action starts
        self._progress: Callable[[str], None] = lambda what: None   # `run`'s: as housekeeping, each action begin
        self.upkeep = LoopUpkeep(self.actuator, self.guard, audit=self._audit, still_leading=self._still_leading,
                                 progress=lambda what: self._progress(what))   # the actuator's recover & co.
        # the last `keep_durations` cycles' durations (None: every cycle's, for an offline run's report); a controller
        # that runs for weeks must not keep one float per cycle for ever (gputide_reconcile_duration_seconds has them)
        self.reconcile_seconds: deque[float] = deque(maxlen=keep_durations)

    # -- one cycle ------------------------------------------------------------------------------------------------
    def run_once(self, stop: threading.Event | None = None) -> CycleReport:
        """One cycle. `stop` (as `run`'s; `gputide run --once`'s SIGTERM), once set, lets the action in progress
        finish and starts no other."""
        if stop is not None:
            self._stop = stop
        t0 = time.perf_counter()
        report = self._cycle()
        report.duration_s = time.perf_counter() - t0
        self.reconcile_seconds.append(report.duration_s)
        m = self.metrics
        if report.status != "standby":
            m.reconcile_duration.observe(report.duration_s)
            m.reconcile_total.labels(result=report.status).inc()
            m.last_reconcile.set(self.clock())
        return report

    @property
    def leading(self) -> bool:
        """Whether this replica led at its last cycle (a standby, or a replica that has not run a cycle yet: False):
        what a side effect outside the cycle asks before it writes (`cmd.run`'s floors given back on a reload)."""
        return self._leading

    def _lead(self, now: float) -> bool:
        """Whether this replica acts this cycle; it takes office (`_take_office`) on taking the lead, and on losing it
        stops reporting what it saw as leader."""
        if not self.elector.try_acquire(now):
            self.metrics.leader.set(0)
            if self._leading:   # demoted: what it reported as leader is no longer its to report
                self.metrics.standby()
            self._leading = False
            return False
        self.metrics.leader.set(1)
        term = getattr(self.elector, "terms", None)   # a renewer thread may lose and retake the Lease between asks
        if not self._leading or term != self._term:
            self._leading, self._term = True, term
            self._take_office()
        return True

    def _take_office(self) -> None:
        """This replica has just taken the lead: it starts as a new process would. Another replica may have led in
        between, tainting, capping and resizing, and this one's streaks are from before it stopped reading: its
        planner state starts empty (what gputide holds on the fleet, hot taints and power caps, is read back from
        the snapshot, as after a restart), the actuator's `recover()` runs again, and the training-wait clocks restart.
        Kept: the safety ledger, merged with the one the previous leader left (cooldowns and evictions only
        restrain), the policy, and the forecaster with its demand history (what was observed, not who acted). A shard's
        source forgets the nodes it owned (`ShardedSource.new_term`): reported and kept power-capped from the earlier
        term, they were another shard's once relabelled meanwhile."""
        self._offices += 1
        new_term = getattr(self.source, "new_term", None)
        if new_term is not None:
            new_term()
        self.state = planner_mod.PlannerState()
        self.upkeep.take_office()
        self.fleet.restart()
        self._last_notes = frozenset()
        self.ledger = self.handover.inherit(self.ledger)
        self.metrics.eviction_budget.set(self.handover.remaining_evictions(self._guard(), self.ledger, self.clock()))

    def _cycle(self) -> CycleReport:
        now = self.clock()
        self._reload_policy()
        if not self._lead(now):   # a standby's eviction-budget gauge stays as it was (`_show_budget`)
            return CycleReport("standby", "not the leader")
        try:
            return self._led_cycle(now)
        finally:
            self._show_budget(now)

    def _show_budget(self, now: float) -> None:
        """gputide_eviction_budget_remaining, at the end of every cycle that began as leader, however it ends: a hold
        (fail-static, on the first read or the fresh one before acting; an emergency stop), the Lease lost while
        reading, an action that raised, or a cycle that got through. Evictions leave their window while the loop
        holds, and an actuator that raised spent its (`_settle`); set only once a cycle got through, the gauge read an
        earlier cycle's number meanwhile: exhausted through a long hold after the window had rolled over. Not on a
        cycle that began as a standby: its gauge stays (`ControllerMetrics.standby`; alerts skip a standby's)."""
        self.metrics.eviction_budget.set(self.handover.remaining_evictions(self._guard(), self.ledger, now))

    def _led_cycle(self, now: float) -> CycleReport:
        """A cycle of this replica as leader at its start (`_cycle`)."""
        self._cycle_office = self._offices
        if self.handover.unsaved:   # a hand-over that failed: tried again every cycle, not only after an action
            self.handover.hand_on(self.ledger)
        if not self.handover.unsaved:   # the moves and scales held back for it go this cycle (`planner.ledger_saved`)
            self.state = planner_mod.ledger_saved(self.state)
        snap = self._observe(now, "")
        if isinstance(snap, CycleReport):   # fail-static: the power caps' expiry renewed, nothing else
            return self.upkeep.holding_still(now, snap)
        if not self._still_leading():   # the reads outlived the Lease: what follows is the new leader's to do
            return CycleReport("standby", "lost the Lease while reading telemetry")
        if self.guard.emergency_stopped():   # nothing renewed: the caps lapse (said once per stop)
            return self.upkeep.holding_still(now, self._hold(now, "emergency_stop", "emergency stop is set"))
        self.metrics.set_fail_static(None)
        self.upkeep.planning(now)   # recover() at a term's first cycle that plans, then housekeeping()
        forecasts, unread = self._forecast(snap)
        self._still_full(snap, now)   # a pod kept off a full node may go there again once it has room
        before = self.state
        plan, self.state = self.planner(snap, forecasts, self.policy, self.state)
        self._log_demand_unknown(snap, getattr(self.state, "demand_held", {}))
        done: list[tuple[ActionResult, float]] = []   # each action's result, and the clock when it came
        refused: list[Action] = []   # the guard's lasting refusals: waited out as if made (`_unsent`)
        kept_off: list[Action] = []   # the review's refusals of moves to full nodes (`_unfilled`)
        try:   # whatever ends the cycle, what did not go out is told to the planner as never proposed (`_unsent`)
            self._log_notes(unread + plan.notes)
            self.fleet.record(snap, self.state, forecasts, self.forecaster, self.policy.forecast.horizon_s, now)
            # the ledger with the accepted actions' evictions and cooldowns is saved before any is carried out
            review = self.handover.review(self._guard(), plan.actions, snap, self.ledger, now)
            rejected = [(a, exc.reason) for a, exc in review.rejected]
            for a, exc in review.rejected:
                self.metrics.rejected.labels(reason=exc.reason).inc()
                log.info("rejected %s: %s (%s)", a.describe(), exc.reason, exc)
                self._audit(now, action_record(a, f"rejected:{exc.reason}", str(exc)))
            # a refused migration is not offered again for a while: its hot GPU is throttled instead; one refused for
            # its target node alone is kept off the full nodes only (`_guard_refusals`); one the hand-over held back
            # (the guard accepted it) only until the ledger is saved (`HeldForLedger`)
            held = [a for a, exc in review.rejected if isinstance(exc, HeldForLedger)]
            kept = [(a, exc) for a, exc in review.rejected if not isinstance(exc, HeldForLedger)]   # the guard's
            whole, kept_off = _guard_refusals(kept)
            self.state = planner_mod.refuse(self.state, whole, now, targets=kept_off, guard=True)
            self.state = planner_mod.hold_back(self.state, held, now, before)   # a scale held back too (`_unsent`)
            refused = [a for a, exc in kept if not isinstance(exc, EmergencyStop)]
            min_gain = self.guard.policy.min_expected_gain
            waiting = {a.service for a in held if _is_loan(a)}   # go once the ledger is saved: their growths wait whole
            if all(_sends_nothing(a, min_gain, waiting) for a in review.accepted):   # none, or growths into loans
                self._act(list(review.accepted), snap, rejected, now, done, waiting)   # held back: each rejected
            else:
                fresh = self._observe(now, "fresh snapshot before acting: ")
                if isinstance(fresh, CycleReport):
                    return fresh
                try:   # what was applied is recorded whatever stops the cycle (an audit write, an unexpected error)
                    self._act(self._revalidate(list(review.accepted), fresh, rejected, now), fresh, rejected, now, done,
                              waiting)
                finally:
                    self._settle(done, fresh, now)
        finally:
            self._unsent(before, plan.actions, done, refused)
            self._unfilled(snap, kept_off, now)
            # this cycle's refusals and releases (`still_full`), whatever ended it: set only once the cycle got
            # through, the gauge missed those of a cycle held on a stale fresh snapshot (it returns above). Not on a
            # replica demoted meanwhile (`_lead`: `ControllerMetrics.standby` zeroed it): set again, a standby
            # reported them until it led again
            if self._leading:
                self.metrics.set_exclusions(planner_mod.exclusions(self.state, self.policy, now))
        return CycleReport("ok", plan=plan, results=[r for r, _ in done], rejected=rejected)

    def _observe(self, now: float, when: str) -> ClusterSnapshot | CycleReport:
        """A snapshot fit to act on, or the fail-static hold reading it ended in: a `TelemetryError` with its reason,
        any other exception (a bug, an answer no check foresaw) with `TELEMETRY_ERROR` and its traceback logged.
        What the reading measured goes into the metrics either way (`ControllerMetrics.set_reading`)."""
        snap, hold = None, None
        try:
            snap = self.source.snapshot()
            check_telemetry(snap, self.policy.safety)
        except TelemetryError as exc:
            hold = self._hold(now, exc.reason, f"{when}{exc}")
        except Exception as exc:  # fail-static whatever broke the read: no half-read fleet is acted on
            hold = self._hold(now, TELEMETRY_ERROR, f"{when}reading telemetry raised {type(exc).__name__}: {exc}",
                              exc_info=True)
        self.metrics.set_reading(snap, self.source, held=hold is not None)
        return snap if hold is None else hold

    def _settle(self, done: list[tuple[ActionResult, float]], fresh: ClusterSnapshot, now: float) -> None:
        """The actions carried out into the safety ledger (budgets: an unknown outcome is spent), each at the time it
        was done (a slow cycle's last migrations dated at its start left their windows minutes early), handed on to
        a successor, and acknowledged to the planner (applied) or refused for a while (failed: a migration whose
        target alone the actuator refused, `ActionResult.refused`, is kept off that node only; a service whose scale
        failed for good is not scaled for a while, `_refused_scale`); a scale applied is told with its cap when short
        of what it asked (`ActionResult.capped_to`), else with None: in full above a cap, it ends it (`planner.cap`).
        Caps and refusals are each dated when the result came: at the cycle's start, a cap met after slow actions was
        believed from before it was met (a spec.replicas sampled before the HPA's clamp ended it:
        `CapBelief.raised_by`), and a refusal's while (`safety.cooldownS`, `hotspots.refusedRetryS`) was cut by how
        long acting took. The review's rejections are refused at the cycle's start (`_cycle`): that is when they were
        refused. A dry run's results (DRY_RUN) go into its what-if ledger alone (`_WhatIf`), never told to the planner
        as done: it would believe a throttle, a taint or a shrink in place that is not, and give it back later."""
        applied = [r.action for r, _ in done if r.outcome == Outcome.APPLIED]
        spent = [(r.action, t) for r, t in done if r.outcome == Outcome.APPLIED or r.maybe_applied]
        self.ledger = self.guard.record(self.ledger, [], fresh, now)   # what left its window since the last cycle
        for a, t in spent:
            self.ledger = self.guard.record(self.ledger, [a], fresh, t)
        if spent:
            self.handover.changed(self.ledger)
        self.what_if = self.guard.record(self.what_if, [], fresh, now)
        for a, t in ((r.action, t) for r, t in done if r.outcome == Outcome.DRY_RUN):   # on the ledger as it is now
            self.what_if = self.guard.record(self.ledger.merged(self.what_if), [a], fresh, t)
        self.state = planner_mod.acknowledge(self.state, applied, fresh, [r.action for r, _ in done if r.unchanged
                                                                          and r.outcome == Outcome.APPLIED])
        for r, t in done:   # each dated when its result came: the cycle's start was minutes early after slow acts
            if r.outcome == Outcome.APPLIED:
                self.state = planner_mod.cap(self.state, [(r.action, r.capped_to)], t)
            elif r.outcome in (Outcome.FAILED, Outcome.RETRY):
                target = r.refused is Refused.TARGET
                self.state = planner_mod.refuse(self.state, () if target else [r.action], t,
                                                targets=[r.action] if target else (),
                                                scales=[r.action] if _refused_scale(r) else ())

    def _guard(self) -> SafetyGuard | _WhatIf:
        """The guard as the review and the eviction-budget gauge see it: a dry run's restrained by its what-if ledger
        too (its actuator's `dry_run`: `DryRunActuator.dry_run`, through a shard's `ShardBound` too)."""
        return _WhatIf(self.guard, self.what_if) if getattr(self.actuator, "dry_run", False) else self.guard

    def _unsent(self, before: Any, planned: tuple[Action, ...], done: list[tuple[ActionResult, float]],
                refused: list[Action]) -> None:
        """The planned actions that did not go out for a passing cause (an emergency stop, in the review or on the fresh
        snapshot, the fresh snapshot otherwise stale, the cycle stopped before them, failed having changed nothing; a
        dry run's went out), told to the planner (`capacity_loop.unsent`: the capacity planner counts a scale as made
        when it plans it, and forgets a scale up that did not go out, or a latency-net step none of whose reclaim
        shrinks did). Not those the guard `refused` for a lasting cause (its minimum gain, a protected workload, a
        budget): forgotten, such a step was asked, refused, logged and audited every cycle; waited out as if made, a
        latency-net step is asked again once not honoured for `emergency_retry_s` (`CapacityState.emergency`), any
        other scale after the service's hold. One the hand-over held back, the ledger unsaved, is no refusal
        (`HeldForLedger`): `unsent` as any, it waits as made only until the ledger is saved (`planner.hold_back`). Not
        after the cycle lost the lead: the state is the next term's then."""
        if self._offices != self._cycle_office:
            return
        scales = [a for a in planned if capacity_loop.remembered(a)]   # all `unsent` reads: the compares stay few
        if not scales or not (isinstance(self.state, planner_mod.PlannerState)
                              and isinstance(before, planner_mod.PlannerState)):
            return
        went = [r.action for r, _ in done if r.outcome in (Outcome.APPLIED, Outcome.DRY_RUN) or r.maybe_applied]
        went += refused
        self.state = capacity_loop.unsent(self.state, before, [a for a in scales if a not in went],
                                          [a for a in scales if a in went])

    def _unfilled(self, snap: ClusterSnapshot, kept_off: list[Action], now: float) -> None:
        """This cycle's refusals of moves to full nodes (`kept_off`, `_guard_refusals`) let go where the guard no longer
        counts the node full once what went out is counted (`planner.still_full` on the ledger `_settle` left): a node
        full only through a move the same review accepted ahead is not, that move not carried out (the fresh snapshot
        stale, or dropped on it, the cycle stopped, the actuator failed having changed nothing, or the hand-over held
        it back, the ledger unsaved, after the guard had counted it). Kept, the pod was kept off a node with room until
        the next cycle that plans, through every hold meanwhile, and counted in gputide_migration_exclusions. Counted
        afresh whenever a move was kept off (one `full_nodes`: `_still_full`), rather than judged by which
        accepted moves went out: a move held back by the hand-over is not among the accepted. Not after the cycle
        lost the lead (`_unsent`)."""
        if not kept_off or self._offices != self._cycle_office:
            return
        self._still_full(snap, now)

    def _still_full(self, snap: ClusterSnapshot, now: float) -> None:
        """The pods the guard kept off a full node (`_guard_refusals`) let back where it no longer counts the node full
        on `snap` and the ledger as it is now (`planner.still_full`; the guard as the review sees it, `_guard`): before
        planning, and at the end of a cycle that kept a move off (`_unfilled`). The guard is asked only while a pod is
        kept off. Its count (`SafetyGuard.full_nodes`) counts the replicas not running (`unavailable.short`) only for
        the few owners the ledger holds migrations of, the ones `_in_flight` reads (the cost: `unavailable.short`)."""
        self.state = planner_mod.still_full(self.state, lambda: self._guard().full_nodes(snap, self.ledger, now))

    def _reload_policy(self) -> None:
        """A changed and valid policy file (`policy_source`, e.g. `app.policy_reload.PolicyReloader.poll`) applies
        from this cycle on, to the planner and the safety guard alike; standby replicas follow it too."""
        new = self.policy_source() if self.policy_source is not None else None
        if new is not None:
            self.policy = new
            self.guard.policy = new.safety

    def _log_notes(self, notes: tuple[str, ...]) -> None:
        """The planner's notes (why it holds or waits) at INFO, each once while it lasts, not every cycle."""
        for note in notes:
            if note not in self._last_notes:
                log.info("plan: %s", note)
        self._last_notes = frozenset(notes)

    def _log_demand_unknown(self, snap: ClusterSnapshot, held_why: Mapping[str, str]) -> None:
        """The services whose demand is unknown (`ClusterSnapshot.demand_unknown`, and those the capacity planner
        holds for without series, `PlannerState.demand_held`, {service: why}: the planner says why, so it is not
        worked out again here), with why, each time that set or those held for change, not every cycle. Co-location
        and consolidation leave them alone either way; thermal relief goes on. The hold is said of the services held
        for (`held_why`: profiled) alone. Before, the log said the capacity planner
        held even for services with no profile, where nothing held; then, from whether it held at all, it said so of
        an unprofiled NaN service held for nothing, and named not the profiled one without series it held for."""
        held = frozenset(held_why)
        unknown = {**held_why, **snap.demand_unknown}
        if (frozenset(unknown), held) == self._demand_unknown:
            return
        if unknown:
            free = sorted(set(unknown) - held)
            log.warning("inference demand unknown for %s: %s; co-location holds for them and consolidation leaves "
                        "their pods alone; thermal relief goes on",
                        "; ".join(f"{n} ({why})" for n, why in sorted(unknown.items())),
                        f"capacity shifting holds for {', '.join(sorted(held))} (gputide_capacity_holding "
                        f"{capacity_loop.HOLD_DEMAND_UNKNOWN})" + (f"; not for {', '.join(free)}, without a capacity "
                                                                    "profile" if free else "")
                        if held else
                        "none has a capacity profile (or capacity shifting is off), so capacity shifting does not "
                        "hold for them")
        elif self._demand_unknown[0]:
            log.info("inference demand known again for %s", ", ".join(sorted(self._demand_unknown[0])))
        self._demand_unknown = (frozenset(unknown), held)

    def _revalidate(self, actions: list[Action], fresh: ClusterSnapshot, rejected: list, now: float) -> list[Action]:
        """The accepted actions that still fit the fresh snapshot and that no emergency stop it shows now holds (a node
        labelled, a namespace stopped since the plan); the others are rejected, each with its group (`whole_groups`)."""
        review = whole_groups(actions, lambda acts: self._fits(acts, fresh), Review)
        for a, exc in review.rejected:
            self._reject(a, exc.reason, str(exc), rejected, now)
        return list(review.accepted)   # a growth into the GPUs of a loan dropped here: rejected with it (`_act`)

    def _fits(self, actions: list[Action], fresh: ClusterSnapshot) -> Review:
        proj = Projection(fresh, self.policy)   # tainted: what the fresh snapshot's nodes carry
        why = [EmergencyStop(f"fresh snapshot before acting: {stop}") if stop else StalePlan.of(proj.apply(a))
               for a, stop in zip(actions, self.guard.stops_now(actions, fresh), strict=True)]
        return Review(tuple(a for a, w in zip(actions, why) if w is None),
                      tuple((a, w) for a, w in zip(actions, why) if w is not None))

    def _act(self, actions: list[Action], fresh: ClusterSnapshot, rejected: list, now: float,
             done: list[tuple[ActionResult, float]], waiting: set[str]) -> None:
        """Apply the actions in turn while this replica may, each result appended to `done` with the clock when it came:
        `stop` and the Lease are checked before each, and once either says no the rest are rejected (counted, audited).
        An actuator that raises (not its own failure results) ends the cycle, the outcome unknown: spent. A training
        growth into the GPUs of a loan is sent only once every loan it names came back applied (or a dry run's), and
        rejected (`group_incomplete`, asking nothing: `fresh` unread) otherwise: a loan held back or refused by the
        review, dropped on the fresh snapshot, or failed (an HPA KEDA keeps, RBAC) keeps its GPUs, and the growth's
        workers would wait pending on them (`_on_loans`; the plan orders loans first). The workers of it that GPUs
        idle already hold go alone (`_reduced`) unless one of its loans is `waiting` (`_idle_workers`): held back for
        the ledger, it goes next cycle and the growth whole with it; come back with its outcome unknown, it may have
        gone. A loan refused, dropped on the fresh snapshot, come back RETRY or FAILED waits out the service's hold:
        the idle part goes now. Not sent, it is not remembered: the next plan grows anew."""
        gone, waiting, min_gain = set[str](), set(waiting), self.guard.policy.min_expected_gain
        for i, planned in enumerate(actions):
            loaned = _on_loans(planned, gone)
            part = _idle_workers(planned, min_gain, waiting) if loaned else 0
            if loaned and not part:
                self._not_sent(planned, 0, rejected, now)   # rejected whole: nothing of it goes
                continue
            why = self._interruption()   # before its idle part: a growth is rejected once, for what stops it
            if why is not None:
                log.warning("%s: %s; %d planned actions not applied", why[0], why[1], len(actions) - i)
                for skipped in actions[i:]:
                    self._reject(skipped, *why, rejected, now)
                break
            a = planned
            if loaned:   # its loans' part rejected, its idle part sent
                self._not_sent(planned, part, rejected, now)
                a = _reduced(planned, part)
            self._progress(f"{a.kind} {a.target}")
            try:
                res = self.actuator.apply(a, fresh)
            except Exception as exc:
                done.append((ActionResult(a, Outcome.FAILED, f"{type(exc).__name__}: {exc}", maybe_applied=True),
                             self.clock()))
                raise
            done.append((res, self.clock()))
            if res.outcome in (Outcome.APPLIED, Outcome.DRY_RUN):
                self.metrics.actions.labels(type=a.kind, reason=reason_label(a)).inc()
                if _is_loan(a):
                    gone.add(a.service)
            else:
                if _is_loan(a) and res.maybe_applied:   # it may have gone: its growths wait, the next plan sees
                    waiting.add(a.service)
                self.metrics.actuation_errors.labels(type=a.kind, outcome=str(res.outcome),
                                                     code=res.code or "unknown").inc()
            detail = res.detail + ("; outcome unknown: counted against the budgets" if res.maybe_applied else "")
            if res.maybe_applied:
                self.metrics.unknown_outcomes.labels(type=a.kind).inc()
            log.info("%s: %s %s", res.outcome, a.describe(), detail)
            self._audit(now, action_record(a, str(res.outcome), detail))

    def _not_sent(self, a: ScaleTraining, part: int, rejected: list, now: float) -> None:
        """A growth into the GPUs of loans that did not go (`_on_loans`) logged and rejected (`group_incomplete`),
        saying where its `part` of workers on GPUs idle already (`_idle_workers`) goes alone (`_reduced`)."""
        why = f"grows into GPUs that a loan of {a.service} frees, and that loan did not go"
        if part:
            why += f"; its +{part} workers on GPUs idle already sent alone"
        log.info("not sent %s: %s", a.describe(), why)
        self._reject(a, GroupIncomplete.reason, why, rejected, now)

    def _interruption(self) -> tuple[str, str] | None:
        """(reason, why) no further action may start: `stop` or an emergency stop (flag or file) is set, or the Lease
        is not ours, or not the one this cycle started under (lost and retaken: another replica may have acted)."""
        if self._stop.is_set():
            return SHUTTING_DOWN, "the controller is stopping (SIGTERM)"
        if self.guard.emergency_stopped():   # set while earlier actions ran (each may take minutes)
            return EmergencyStop.reason, "emergency stop is set"
        if not self._still_leading():
            return NOT_LEADER, "this replica no longer holds the Lease it planned under"
        return None

    def _still_leading(self) -> bool:
        """This replica holds the Lease, and has held it since this cycle began (not lost and taken again)."""
        return self._lead(self.clock()) and self._offices == self._cycle_office

    def _reject(self, a: Action, reason: str, detail: str, rejected: list, now: float) -> None:
        rejected.append((a, reason))
        self.metrics.rejected.labels(reason=reason).inc()
        self._audit(now, action_record(a, f"rejected:{reason}", detail))

    def _forecast(self, snap: ClusterSnapshot) -> tuple[Mapping[str, Forecast] | None, tuple[str, ...]]:
        """This cycle's forecasts, those the capacity planner can read only (`readable_forecasts`), and a note for
        each left out: the planner and the forecast gauges see the same set. Given to the gauges, a NaN forecast the
        planner left out was exported as NaN, and one of step 0 raised in `window_max` every cycle, its series frozen
        at the last good value (auditor a7); left out here, its service's series go absent, as a service's without a
        forecast do."""
        if self.forecaster is None or not self.policy.forecast.enabled:
            return None, ()
        try:
            kept, notes = readable_forecasts(self.forecaster(snap) or {})
        except Exception as exc:  # a broken forecaster must not stop hotspot protection
            log.warning("forecaster failed, planning without a forecast: %s", exc)
            return None, ()
        return kept, tuple(f"forecast: {n}" for n in notes)   # its gauges: `FleetRecorder.record`

    def _hold(self, now: float, reason: str, message: str, exc_info: bool = False) -> CycleReport:
        self._break_streaks()
        self.metrics.set_fail_static(reason)
        self.fleet.hold(self.forecaster, self.policy.forecast.horizon_s)   # no forecast, no fleet shown as current
        log.warning("fail-static (%s): holding still: %s", reason, message, exc_info=exc_info)
        self._audit(now, {"action": "hold", "target": "", "reason": message, "outcome": f"fail_static:{reason}",
                          "expected_gain": 0.0})
        return CycleReport("fail_static", reason)

    def _break_streaks(self) -> None:
        """A hold is a gap in the readings: the planner's streaks of readings in a row (hot, cool, a service's slack)
        start again from the next fresh one, so no hotspot, release or give-back follows from readings taken before
        and after the controller was blind. What is active or given stays (the taints, caps and shrinks it holds)."""
        if not isinstance(self.state, planner_mod.PlannerState):   # a wrapping planner's own state: its own business
            return
        hs, co = self.state.hotspots, self.state.colocation
        if not (hs.hot_streak.any() or hs.cool_streak.any() or co.slack_streak):
            return
        zeros = hs.hot_streak * 0
        zeros.flags.writeable = False
        self.state = replace(self.state, hotspots=replace(hs, hot_streak=zeros, cool_streak=zeros),
                             colocation=replace(co, slack_streak=MappingProxyType({})))

    def _audit(self, now: float, record: dict) -> None:
        if self.audit is not None:
            self.audit.write({"time": now, **record})

    # -- forever ----------------------------------------------------------------------------------------------------
    def run(self, interval_s: float, stop: threading.Event, beat: Callable[[], None] | None = None,
            progress: Callable[[str], None] | None = None) -> None:
        """Reconcile every `interval_s` until `stop` is set; one failing cycle never ends the loop. `beat()` is
        called after every iteration, whatever its result, and `progress(what)` as the actuator's housekeeping and
        each action begin (the liveness probe's heartbeats: a cycle of many slow actions is moving). `stop` set
        mid-cycle lets the action in progress finish and starts no other; the Lease is released on the way out."""
        self._stop, self._progress = stop, progress or self._progress
        try:
            while not stop.is_set():
                try:
                    self.run_once()
                except Exception:
                    self.metrics.reconcile_total.labels(result="error").inc()
                    log.exception("reconcile cycle failed")
                if beat is not None:
                    beat()
                stop.wait(interval_s)
        finally:
            self.elector.release()
            self.metrics.leader.set(0)
