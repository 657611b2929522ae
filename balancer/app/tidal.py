"""The `tidal` scenario: a real day/night inference trace on the demo fleet, shared with elastic training.

Setup (`setup_tidal`): the default demo fleet (256 GPUs in four pools: H100-SXM, A100-SXM4-80GB, L40S,
A100-PCIE-40GB). Each pool runs one inference service pinned to it (``llm-<model>``, the way a `gpu_spec`
constraint pins a deployment) and two elastic training jobs pinned to it (a synchronous job on mixed GPU models
runs at its slowest worker's speed). Whether a job saves a checkpoint when a shrink sends its removed workers
SIGTERM is the option ``checkpoint_on_sigterm`` (``gputide simulate --scenario tidal --checkpoint-on-sigterm
none|all``): ``none`` (the default) has every shrink lose the work since the job's last checkpoint, as on a
Kubernetes Job without `gputide.io/checkpoint-on-sigterm: "true"`; ``all`` has no shrink lose anything. The trace,
loaded with `balancer.forecast.traces.load_demand` (a folder is read as ServeGen, a file as ``timestamp,value`` CSV), is
played over the *last* ``days`` of its span; everything before is the forecaster's history. Collector outages
(`mask_outages`) are interpolated, not played as zero demand. Each service gets a share of the demand proportional to
its pool's capacity, scaled so that **at the peak of the simulated window the services need ``PEAK_SHARE`` (60 %) of
their pools' GPUs** -- stated in ``summary.json`` under ``tidal``. A replica's SLO-safe rate is the rate at which the
simulator's M/M/1 model puts at most ``VIOLATION_TARGET`` of requests over the SLO.

Policies (registered into `balancer.app.scenarios.POLICIES`):

* ``static``: every service holds the replicas its peak in the window needs (plus the shared headroom); training
  gets the rest (`balancer.plan.baselines.plan_static`).
* ``reactive``: an HPA on current utilisation with the 5-minute downscale stabilisation window; GPUs it frees are
  loaned to training and reclaimed by preemption (`plan_reactive`).
* ``gputide``: exactly what `gputide run` runs with ``capacity.enabled``: one `Reconciler` whose planner is the
  hotspot/co-location plan plus the forecast-driven capacity plan (`balancer.app.capacity_run.CapacityLoopPlanner`,
  the policy file's ``capacity`` section applied), every action through the `SafetyGuard` (so the policy's
  eviction budget bounds the reclaims). Its forecaster is the loop's `DemandForecaster` on the total demand
  (MSTL, conformal-calibrated quantiles, refitted every ``REFIT_S`` of simulated time and conditioned on each new
  trace step in between), split by each service's share; its burst allowance is learned from the demand it
  observed each cycle over the trailing week (`RiseTracker`), seeded with the history before the window.

All three act every 60 s through the same `SimActuator`; static and reactive bypass the guard (they model what
an operator's fixed allotment and an HPA do, neither of which has gputide's budgets).
"""

from __future__ import annotations

import math
import time
import weakref
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from balancer import catalog
from balancer.actuate.sim import SimActuator
from balancer.app import scenarios
from balancer.app.capacity_run import CapacityLoopPlanner
from balancer.errors import InputError
from balancer.forecast import load_demand
from balancer.forecast.online import DemandForecaster
from balancer.forecast.traces import MAX_STEPS, TooFewSteps, TooLong, mask_outages, parse_step
from balancer.model import ClusterSnapshot, Forecast
from balancer.plan.baselines import ReactivePolicy, ReactiveState, plan_reactive, plan_static
from balancer.plan.capacity import (
    CapacityDecision,
    CapacityPolicy,
    CapacityView,
    ServiceCapacity,
    view_from_snapshot,
)
from balancer.plan.capacity_plan import replicas_for
from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec

PEAK_SHARE = 0.6            # at the window's peak the services need this share of their pools' GPUs
VIOLATION_TARGET = 1e-4     # a replica's SLO-safe rate puts at most this share of requests over the SLO
SLO_S, BASE_S, RPS_A100, WARMUP_S = 2.0, 0.2, 40.0, 300.0
REFIT_S = 86400.0          # the forecaster refits once a simulated day, conditions on each step in between
DEFAULT_TRACE = Path(__file__).resolve().parents[1] / "data" / "servegen-language" / "m-small"
CAPACITY = CapacityPolicy()
# which training jobs save a checkpoint on SIGTERM (a shrink then loses nothing): none, the default, is the honest
# assumption (a trainer that does not say so loses its work since its last checkpoint, as gputide assumes of a Job
# without `gputide.io/checkpoint-on-sigterm: "true"`); all is the best case for every policy that resizes
CHECKPOINT_ON_SIGTERM = ("none", "all")


@dataclass
class TidalContext:
    """What the tidal policies need beyond the simulator: profiles, the demand history and the scenario facts."""

    profiles: dict[str, ServiceCapacity]
    shares: dict[str, float]
    history: pd.Series                 # scaled total demand, whole trace (policies only read the past)
    info: dict[str, Any] = field(default_factory=dict)
    splits: list[dict[str, int]] = field(default_factory=list)


_CONTEXTS: weakref.WeakKeyDictionary[SimCluster, TidalContext] = weakref.WeakKeyDictionary()


def context(sim: SimCluster) -> TidalContext | None:
    return _CONTEXTS.get(sim)


def safe_rate(mu: float, slo_s: float = SLO_S, base_s: float = BASE_S, eps: float = VIOLATION_TARGET) -> float:
    """Largest load (req/s) a replica of service rate `mu` serves with at most `eps` of requests over the SLO."""
    return max(mu - math.log(1.0 / eps) / (slo_s - base_s), 0.05 * mu)


def load_trace(path: str | None, fmt: str | None = None, step: str = "10min") -> pd.Series:
    """The trace at `step` (10 min: the scenario's own, whatever `simulate --step` is), outages interpolated. One too
    long at it is refused as too long for the scenario: the loader's 'a --step of at least 800 seconds loads it'
    named a --step, the simulator's, that the scenario never loads its trace at (audit a3). One too long or spanning
    under two steps with no positive demand is refused as having none, as hotspot refuses it at once: a 1-minute
    trace of zeros was refused as under two steps, and made 20 minutes long, as having no demand."""
    path = str(path or DEFAULT_TRACE)
    fmt = fmt or ("servegen" if Path(path).is_dir() else "csv")
    try:
        y = load_demand(path, fmt, step=step)
    except TooLong as exc:
        _refuse_no_demand(path, fmt, f"{exc.least_s}s", exc)
        most = MAX_STEPS * parse_step(step).total_seconds()
        raise InputError(path, "trace", f"a trace spanning {exc.span_s:.0f}s", f"a trace spanning at most {most:.0f}s "
                         f"({most / 86400 / 365.25:.1f} years): the tidal scenario plays it at {step} steps, at most "
                         f"{MAX_STEPS} of them, whatever --step") from exc
    except TooFewSteps as exc:   # under two 10-minute steps: at 1s, under 1200 of them, it loads
        _refuse_no_demand(path, fmt, "1s", exc)
        raise
    y = mask_outages(y).interpolate(limit_direction="both")
    if not np.isfinite(y.to_numpy()).any() or float(y.max()) <= 0:
        raise _no_demand(path)
    return y


def _no_demand(path: str) -> InputError:
    """The refusal of a trace with no positive demand, worded as the loader's of a simulator's trace
    (`balancer.forecast.traces._at_load_step`): field 'value', as `simulate --scenario hotspot` says it."""
    return InputError(path, "value", "no positive demand", "a trace with positive demand values",
                      detail="every observed value is 0")


def _refuse_no_demand(path: str, fmt: str, step: str, exc: TooLong | TooFewSteps) -> None:
    """Refuses a trace too long, or spanning under two steps, at the scenario's step as having no positive demand
    where it has none, read at `step` (the too-long one's least, 1s the other's: it loads there): refused as too long
    (or short), changed to fit, it was then refused as this, as a hotspot trace was (e7b98461). Otherwise returns, for
    `exc`, the loader's refusal, to stand. An error path's second read only."""
    try:
        y = load_demand(path, fmt, step=step)
    except InputError:   # refused there for another reason: `exc` stands
        return
    if not (y > 0).any():
        raise _no_demand(path) from exc


def setup_tidal(sim: SimCluster, *, days: float, seed: int, trace: str | None = None, fmt: str | None = None,
                peak_share: float = PEAK_SHARE, checkpoint_on_sigterm: str = "none") -> list[scenarios.Event]:
    """Add the services and jobs to `sim`, move its clock to the window start; returns no fault events.
    `checkpoint_on_sigterm`: ``none`` (every job loses its work since its last checkpoint when shrunk) or ``all``
    (every job saves a checkpoint on SIGTERM, so a shrink loses nothing)."""
    if checkpoint_on_sigterm not in CHECKPOINT_ON_SIGTERM:
        raise InputError(None, "--checkpoint-on-sigterm", checkpoint_on_sigterm, " or ".join(CHECKPOINT_ON_SIGTERM))
    y = load_trace(trace, fmt)
    step_s = float(y.index[1].timestamp() - y.index[0].timestamp())
    window = int(round(days * 86400.0 / step_s))
    if window > len(y):
        raise InputError(trace, "--days", days, f"at most the trace's span ({len(y) * step_s / 86400:.1f} days)")
    if window < 1:   # no step of the trace in the window: its start was y.index[len(y)], an IndexError
        raise InputError(trace, "--days", days, f"at least one step of the trace ({step_s / 86400:.4g} days)")
    start = float(y.index[len(y) - window].timestamp())
    sim.time = sim.start_time = start
    models = sorted(set(sim.gpu_model.tolist()))
    pool = {m: int((sim.gpu_model == m).sum()) for m in models}
    rate = {m: RPS_A100 * catalog.CATALOGUE[m].inference_tput for m in models}
    cap = {m: safe_rate(rate[m]) for m in models}
    total_cap = sum(pool[m] * cap[m] for m in models)
    peak = float(y.iloc[len(y) - window:].max())
    scale = peak_share * total_cap / (1.0 + CAPACITY.headroom) / peak
    scaled = y * scale
    times = np.array([t.timestamp() for t in y.index])
    values = scaled.to_numpy(float)
    profiles, shares = {}, {}
    for m in models:
        name = f"llm-{m.lower()}"
        share = pool[m] * cap[m] / total_cap
        prof = ServiceCapacity(name=name, rps_per_replica=cap[m], warmup_s=WARMUP_S, min_replicas=1,
                               slo_latency_s=SLO_S, max_replicas=pool[m], models=frozenset({m}))
        home = replicas_for(peak * scale * share, prof, CAPACITY.headroom)
        profiles[name] = replace(prof, home_replicas=home)
        shares[name] = share
        curve = values * share
        sim.add_service(ServiceSpec(
            name=name, slo_latency_s=SLO_S, base_latency_s=BASE_S, rps_a100=RPS_A100, replicas=home,
            gpu_memory_mib=16384, allowed_models=frozenset({m}), warmup_s=WARMUP_S,
            demand=lambda t, c=curve: float(np.interp(t, times, c))))
        left = pool[m] - home
        for k, (prio, ckpt) in enumerate(((10, 1800.0), (5, 3600.0))):
            workers = left // 2 + (left % 2 if k == 0 else 0)
            sim.add_training_job(TrainingJobSpec(
                name=f"train-{m.lower()}-{'ab'[k]}", workers=max(workers, 1), elastic_min=1, elastic_max=pool[m],
                checkpoint_interval_s=ckpt, priority=prio, gpu_memory_mib=20480, allowed_models=frozenset({m}),
                checkpoint_on_sigterm=checkpoint_on_sigterm == "all"))
    sim.schedule()
    info = {"trace_peak_rps": peak, "scale": scale, "peak_share_of_pool_gpus": peak_share,
            "peak_inference_gpus": sum(p.home_replicas for p in profiles.values()), "fleet_gpus": sim.n_gpus,
            "window_start": y.index[len(y) - window].isoformat(), "days": days, "history_days":
            (len(y) - window) * step_s / 86400.0, "headroom": CAPACITY.headroom, "violation_target": VIOLATION_TARGET,
            "checkpoint_on_sigterm": checkpoint_on_sigterm,
            "statement": f"at the window's peak the inference services need {peak_share:.0%} of their pools' "
                         f"GPUs ({sum(p.home_replicas for p in profiles.values())} of {sim.n_gpus})"}
    _CONTEXTS[sim] = TidalContext(profiles=profiles, shares=shares, history=scaled, info=info)
    return []


# ---- policies --------------------------------------------------------------------------------------------------
class _CapacityController:
    """Shared plumbing: observe the sim, decide, apply through the SimActuator, audit, keep the split."""

    name = "capacity"

    def __init__(self, sim: SimCluster, ctx: scenarios.PolicyContext) -> None:
        tc = context(sim)
        if tc is None:
            raise InputError(None, "--policy", self.name, "static and reactive need --scenario tidal")
        self.tc, self.actuator, self.audit = tc, SimActuator(sim), ctx.audit
        self.interval_s, self.next_at = ctx.interval_s, sim.time
        self.reconcile_seconds: list[float] = []

    def decide(self, sim: SimCluster, snap: ClusterSnapshot) -> CapacityDecision:
        raise NotImplementedError

    def on_step(self, sim: SimCluster) -> None:
        if sim.time + 1e-9 < self.next_at:
            return
        self.next_at = sim.time + self.interval_s
        t0 = time.perf_counter()
        snap = sim.snapshot()
        decision = self.decide(sim, snap)
        self.reconcile_seconds.append(time.perf_counter() - t0)
        self.tc.splits.append(decision.split.as_dict())
        for action in decision.actions:
            result = self.actuator.apply(action, snap)
            if self.audit is not None:
                self.audit.write({"time": sim.time, "action": action.kind, "target": action.target,
                                  "reason": action.reason, "expected_gain": action.expected_gain,
                                  "outcome": str(result.outcome), "policy": self.name})

    def view(self, sim: SimCluster, snap: ClusterSnapshot, bursts: dict[str, float] | None = None) -> CapacityView:
        # the work a shrink loses, from the simulator's accounting: none for a job that checkpoints on SIGTERM
        since = dict(zip(sim.training_jobs, np.where(sim.saves_on_sigterm, 0.0, sim.acct.job_since_ckpt).tolist()))
        # jobs suspended to 0 workers come with the snapshot (`SimCluster.suspended_jobs`), as from Kubernetes
        return view_from_snapshot(snap, self.tc.profiles, since, bursts=bursts)


class StaticController(_CapacityController):
    name = "static"

    def decide(self, sim: SimCluster, snap: ClusterSnapshot) -> CapacityDecision:
        return plan_static(self.view(sim, snap), CAPACITY)


class ReactiveController(_CapacityController):
    name = "reactive"

    def __init__(self, sim: SimCluster, ctx: scenarios.PolicyContext) -> None:
        super().__init__(sim, ctx)
        self.state = ReactiveState()
        self.policy = ReactivePolicy(target_utilisation=1.0 / (1.0 + CAPACITY.headroom))

    def decide(self, sim: SimCluster, snap: ClusterSnapshot) -> CapacityDecision:
        decision, self.state = plan_reactive(self.view(sim, snap), self.policy, self.state, CAPACITY)
        return decision


class TidalForecaster:
    """The controller's own `DemandForecaster` (conformal-calibrated quantiles, refitted once a simulated day)
    fed the scaled total demand one trace step at a time, once the step is over; seeded with the history."""

    def __init__(self, history: pd.Series, start: float, model: str = "mstl", horizon_s: float = 3 * 3600.0,
                 timezone: str = "UTC") -> None:
        self.step_s = float(history.index[1].timestamp() - history.index[0].timestamp())
        self.times = np.array([t.timestamp() for t in history.index])
        self.values = history.to_numpy(float)
        self.horizon = int(math.ceil(horizon_s / self.step_s)) + 1
        self.forecaster = DemandForecaster(model=model, step_s=self.step_s, refit_every=int(REFIT_S / self.step_s),
                                           timezone=timezone)
        self.fed = int(np.searchsorted(self.times + self.step_s, start, side="right"))
        self.forecaster.observe_history("total", history.iloc[:self.fed])
        self.seen, self.cached = -1, None

    def forecast(self, now: float) -> Forecast | None:
        # a step is observed once it is over: its start + step_s <= now
        seen = int(np.searchsorted(self.times + self.step_s, now, side="right"))
        if seen == self.seen:
            return self.cached
        for k in range(self.fed, seen):
            self.forecaster.update("total", float(self.times[k]), float(self.values[k]))
        self.fed = max(self.fed, seen)
        try:
            self.cached = self.forecaster.forecast("total", now, self.horizon)
        except ValueError:  # not enough history yet
            self.cached = None
        self.seen = seen
        return self.cached


class GputideTidal:
    """`gputide` as `gputide run` runs it: one Reconciler whose planner is the hotspot plan plus the capacity plan
    (`CapacityLoopPlanner`), every action through the safety guard; the forecast is the scenario's total-demand
    forecaster split by each service's share."""

    def __init__(self, sim: SimCluster, ctx: scenarios.PolicyContext) -> None:
        tc = context(sim)
        if tc is None:
            self.loop = _LOOP_GPUTIDE(sim, ctx)
        else:
            cap = CapacityPolicy.from_config(ctx.policy.capacity, CAPACITY)
            total = TidalForecaster(tc.history, sim.time, horizon_s=cap.loan_horizon_s + 1800.0,
                                    timezone=ctx.policy.forecast.timezone)

            def forecaster(snap: ClusterSnapshot) -> dict[str, Forecast]:
                fc = total.forecast(snap.time)
                return {} if fc is None else {
                    name: Forecast(service=name, issued_at=fc.issued_at, step_s=fc.step_s,
                                   quantiles={q: a * share for q, a in fc.quantiles.items()})
                    for name, share in tc.shares.items()}

            def history(name: str, now: float) -> pd.Series:
                past = tc.history * tc.shares[name]
                return past[past.index.as_unit("s").asi8 < now]

            policy = replace(ctx.policy, capacity=replace(ctx.policy.capacity, enabled=True))
            planner = CapacityLoopPlanner(tc.profiles, cap, ctx.interval_s, history=history)
            self.loop = _LOOP_GPUTIDE(sim, replace(ctx, policy=policy, options={
                **ctx.options, "forecaster": forecaster, "planner": planner}))
        self.reconcile_seconds = self.loop.reconcile_seconds

    def on_step(self, sim: SimCluster) -> None:
        cycles = len(self.reconcile_seconds)
        self.loop.on_step(sim)
        tc = context(sim)
        split = self.loop.reconciler.state.capacity_split if tc is not None else None
        if split is not None and len(self.reconcile_seconds) > cycles:  # a cycle ran: record the split it left
            tc.splits.append(dict(split))


_LOOP_GPUTIDE = scenarios.POLICIES["gputide"]
scenarios.register_policy("static", StaticController)
scenarios.register_policy("reactive", ReactiveController)
scenarios.register_policy("gputide", GputideTidal)
def tidal_summary(sim: SimCluster, summary: dict[str, Any]) -> dict[str, Any]:
    """Add the scenario facts, SLO-violating requests and the mean capacity split to a run's summary."""
    tc = context(sim)
    if tc is None:
        return summary
    st = sim.stats()
    out = dict(summary)
    out["tidal"] = dict(tc.info)
    out["inference"] = dict(summary["inference"], slo_violating_requests=sum(
        s["slo_violations"] for s in st["inference"].values()))
    if tc.splits:
        out["capacity_gpus_mean"] = {k: float(np.mean([s[k] for s in tc.splits])) for k in tc.splits[0]}
    return out


scenarios.SCENARIOS["tidal"] = scenarios.Scenario(
    "tidal", "a real inference tide (ServeGen m-small by default) shared with elastic training on the demo fleet",
    lambda: __import__("balancer.fleet", fromlist=["demo_fleet"]).demo_fleet(), setup_tidal, default_days=7.0,
    summarise=tidal_summary)
