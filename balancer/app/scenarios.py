"""Simulation scenarios and the harness that runs a control policy against the simulator.

`run_simulation(sim, policy_name, days, step_s, out_dir, ...)` steps a prepared `SimCluster`, lets the chosen
*control policy* act after every step, and writes `summary.json`, `timeseries.csv`, `audit.jsonl` and plots.
Control policies live in the `POLICIES` registry (`name -> factory(sim, context) -> SimController`): `none` does
nothing, `gputide` runs the real `Reconciler` (sim telemetry source, sim actuator, the planner, the safety
chokepoint) on the simulated clock. Other applications add their own (`static`, `reactive`, tidal ...) with
`register_policy` or per call with `extra_policies=`.

Scenarios live in `SCENARIOS` (`name -> Scenario`): a scenario builds the fleet's workload and a list of timed
`Event`s (faults). `hotspot`: a 64-GPU fleet (A100 air-cooled and H100 liquid-cooled nodes) about 85% allocated
with inference services that follow a daily tide and elastic training jobs; on the first afternoon one air-cooled
node's cooling degrades (inlet +10 C, thermal resistance x1.35) for six hours, enough to push its busy GPUs past
their slowdown temperature.
"""

from __future__ import annotations

import csv
import inspect
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from balancer import fleet as fleet_mod
from balancer.actuate.sim import SimActuator
from balancer.config import BalancerPolicy
from balancer.errors import InputError
from balancer.loop import JsonlAudit, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.sim import ServiceSpec, SimCluster, TidalDemand, TrainingJobSpec
from balancer.telemetry.sim import SimTelemetrySource

if TYPE_CHECKING:
    from balancer.forecast.traces import TooFewSteps

HOUR = 3600.0
MOST_STEP_S = 3600   # simulate's largest --step (balancer.cmd.simulate): the most a refusal names
TRACE_FORMATS = ("csv", "servegen", "requests")   # balancer.forecast.traces.FORMATS, without importing pandas


# ---- control policies ------------------------------------------------------------------------------------------
class SimController(Protocol):
    reconcile_seconds: list[float]

    def on_step(self, sim: SimCluster) -> None: ...


@dataclass
class PolicyContext:
    policy: BalancerPolicy
    audit: JsonlAudit | None
    interval_s: float = 60.0
    metrics: ControllerMetrics = field(default_factory=ControllerMetrics)
    options: Mapping[str, Any] = field(default_factory=dict)


PolicyFactory = Callable[[SimCluster, PolicyContext], SimController]


class NoController:
    """The `none` policy: the fleet runs on its own (the simulator's scheduler still places pending pods)."""

    def __init__(self, sim: SimCluster, ctx: PolicyContext) -> None:
        self.reconcile_seconds: list[float] = []

    def on_step(self, sim: SimCluster) -> None:
        return None


class GputideController:
    """The `gputide` policy: the real reconcile loop, every `interval_s` of simulated time."""

    def __init__(self, sim: SimCluster, ctx: PolicyContext) -> None:
        # keep_durations=None: the report's cycle times (and tidal's "a cycle ran") count every cycle of the run
        self.reconciler = Reconciler(source=SimTelemetrySource(sim), actuator=SimActuator(sim), policy=ctx.policy,
                                     clock=lambda: sim.time, metrics=ctx.metrics, audit=ctx.audit,
                                     forecaster=ctx.options.get("forecaster"), keep_durations=None,
                                     **({"planner": ctx.options["planner"]} if "planner" in ctx.options else {}))
        self.interval_s = ctx.interval_s
        self.next_at = sim.time
        self.reconcile_seconds = self.reconciler.reconcile_seconds

    def on_step(self, sim: SimCluster) -> None:
        if sim.time + 1e-9 >= self.next_at:
            self.reconciler.run_once()
            self.next_at = sim.time + self.interval_s


POLICIES: dict[str, PolicyFactory] = {"none": NoController, "gputide": GputideController}


def register_policy(name: str, factory: PolicyFactory) -> None:
    POLICIES[name] = factory


# ---- scenarios -------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Event:
    time: float
    description: str
    apply: Callable[[SimCluster], None]


@dataclass(frozen=True)
class Scenario:
    name: str
    description: str
    default_fleet: Callable[[], fleet_mod.Fleet]
    setup: Callable[..., list[Event]]   # (sim, *, days, seed, trace[, trace_format]) -> events
    default_days: float = 2.0
    # the scenario's own facts added to summary.json (e.g. the tide's SLO-violating requests); None: nothing
    summarise: Callable[[SimCluster, dict[str, Any]], dict[str, Any]] | None = None


HOTSPOT_FLEET_YAML = """
apiVersion: gputide/v1alpha1
kind: FleetSpec
metadata: {name: hotspot}
spec:
  nodeGroups:
    - {namePrefix: a100-, count: 5, gpuModel: A100-SXM4-80GB, gpusPerNode: 8, nvlinkDomainSize: 8,
       cpuMilli: 128000, memoryMiB: 1048576, cooling: air, inletC: 25}
    - {namePrefix: h100-, count: 3, gpuModel: H100-SXM, gpusPerNode: 8, nvlinkDomainSize: 8,
       cpuMilli: 192000, memoryMiB: 2097152, cooling: liquid, inletC: 30}
"""


def hotspot_fleet() -> fleet_mod.Fleet:
    import yaml

    return fleet_mod.from_dict(yaml.safe_load(HOTSPOT_FLEET_YAML), "<hotspot scenario fleet>")


@dataclass(frozen=True, eq=False)
class TraceShape:
    """A demand trace loaded once (`load_trace_shape`): its values per step, gaps interpolated, repeated over its span.
    `demand(peak)` is the curve scaled so its maximum is `peak`; a scenario with several services scales one load
    for each (the hotspot scenario parsed the file once per service)."""

    values: np.ndarray
    step_s: float

    def demand(self, peak: float) -> Callable[[float], float]:
        values = np.nan_to_num(self.values) * (peak / float(np.nanmax(self.values)))
        step, span = self.step_s, self.step_s * len(values)
        return lambda t: float(values[int((t % span) // step)])


def load_trace_shape(path: str, fmt: str = "csv", step_s: float | None = None) -> TraceShape:
    """A trace (`fmt`: csv, servegen or requests) as a `TraceShape`. One rule with `step_s` (the simulator's step):
    a trace whose own step is finer than `step_s` (or under 1s) is loaded at `step_s`, its steps averaged (a requests
    log's requests counted per `step_s`) as `forecast backtest --step` resamples a trace, in one parse (`load_demand`'s
    `coarsen_to`; loaded at its own step and then again at `step_s`, a 5M-row log was parsed twice). Sampled once a
    step instead, a trace alternating 10 and 14 each second played 10 throughout at a 60 s step (12 at 0.5 s, which
    the loader refuses to read as it is and the rule averaged). Without `step_s` a trace is played at its own step and
    one under 1s is refused (exit 2). With it, a trace refused at its own step for giving too many steps (59 days at
    1 s) is loaded at `step_s`, the refusal naming `step_s`: one naming a step ('0 days 00:00:01') the user never gave
    was no help (audit a11). One too long there too is refused as `--step`, as one too short for it is: the loader's
    wording ('step', '0 days 00:01:00') was the one trace refusal of simulate's not naming the flag (review r5)."""
    from balancer.forecast.traces import MAX_STEPS, TooFewSteps, TooLong, load_demand

    fmt = fmt or "csv"
    try:
        y = load_demand(path, fmt, coarsen_to=step_s)
    except TooLong as exc:   # named as the loader's other refusals at --step are: '--step', the value given
        if step_s is None:
            raise
        raise InputError(path, "--step", step_s, f"a --step of at least {exc.least_s} seconds loads it (at most "
                         f"{MAX_STEPS} steps over the trace's span)", detail=exc.detail) from exc
    except TooFewSteps as exc:   # the loader's other refusals stand as they are, the trace read once
        if step_s is None:
            raise
        _refuse_too_few_steps(path, fmt, step_s, exc)
        raise
    values = y.interpolate(limit_direction="both").to_numpy(dtype=float)
    if values.size == 0 or not np.isfinite(values).any() or np.nanmax(values) <= 0:
        raise InputError(path, "value", "no positive demand", "a trace with positive demand values")
    return TraceShape(values, _step_of(y))


def _refuse_too_few_steps(path: str, fmt: str, step_s: float, exc: TooFewSteps) -> None:
    """`exc`, the loader's refusal of a trace at `step_s` as spanning under two steps ('field 'rows': invalid value
    1', '1 observed steps'), never said that the simulator's --step was what to change (audit a11): a trace that loads
    at a finer step (its own, else 1s) is refused naming --step and the largest one that plays it. Otherwise returns,
    for the loader's refusal to stand (an empty trace, one spanning under 1s). One refused at its own step as under
    two observed steps too is refused naming a coarser --step that plays it where one does
    (`_refuse_naming_a_coarser_step`); else, like one refused at its own step for another reason, with that refusal,
    as before it was loaded at `step_s`. An error's path only: a trace that plays is parsed once. `exc` loaded at
    its own step (`exc.own`: --step not finer than it) is its refusal at its own step: not read again for it."""
    from balancer.forecast.traces import OwnStepTooFine, TooFewSteps, TooLong

    fine, own = (None, exc) if exc.own else _at_own_step(path, fmt)
    if own is not None:   # its own step under 1s, or too many steps at it: tried at 1s
        if isinstance(own, TooFewSteps) and own.field == "value":   # under two observed at its own step too
            _refuse_naming_a_coarser_step(path, fmt, step_s, own)
        if not isinstance(own, (OwnStepTooFine, TooLong)):
            raise own
        fine = _loaded_or_none(path, fmt, "1")
    if fine is not None:
        raise _too_few_steps(path, fmt, step_s, fine) from exc


def _refuse_naming_a_coarser_step(path: str, fmt: str, step_s: float, own: TooFewSteps) -> None:
    """Refuses --step naming one that plays a trace the loader refuses at its own step as under two observed steps
    (`own`), where one does; otherwise returns, for `own` to stand. A --step coarser than the trace's own regroups it
    on the epoch, which may split demand observed within one own step: values only at 29 and 31 s past the start of
    a 7 s step play at --step 10 and 30, not 20 (31ff8771). `own` named no --step ('1 observed steps'), as though no
    --step played it.

    Named: the coarsest playing --step up to the one given, as a user who chose a --step chose how fine the simulation
    is, and a finer one keeps that (as the refusal of a trace too short for --step names one below it); where none
    does, the finest above it, the least resolution given up. The --steps tried are the whole seconds coarser than the
    trace's own (one at most its own loads it at its own, refused) up to `simulate`'s most, all judged from one more
    load, at 1s, not one load per candidate (`_plays_at`). A trace too long to load at 1s is left to `own`, as is
    one where no candidate can play, without that load: its own step 1s (a coarser step joins its 1s steps, under
    two observed) or at least `simulate`'s most (no whole --step coarser). So is one whose steps at 1s are all 0,
    which a --step named would play as no demand, refused then as such ('no positive demand'). Reached by a requests
    log whose requests all lie in its first and last 1s steps, partly covered and so not observed (two requests 100 s
    apart: 99 observed steps, each 0); a csv or ServeGen trace observed only as 0 never gets here, refused as such by
    its load at `step_s` (`balancer.forecast.traces._at_load_step`)."""
    own_s = own.own_step_s   # a requests log's own step: 1 min
    if own_s == 1 or own_s >= MOST_STEP_S:
        return
    fine = _loaded_or_none(path, fmt, "1")
    if fine is None or not np.nanmax(fine.to_numpy(float)) > 0:   # no demand: a --step named would then refuse it
        return
    steps = np.arange(math.floor(own_s) + 1, MOST_STEP_S + 1)
    plays = steps[_plays_at(fine, fmt, steps)]
    below, above = plays[plays <= step_s], plays[plays > step_s]
    if below.size:
        named, which = int(below[-1]), f"the coarsest up to {step_s:g}s giving it two observed steps"
    elif above.size:
        named, which = int(above[0]), f"the finest giving it two observed steps, none up to {step_s:g}s does"
    else:
        return
    raise InputError(path, "--step", step_s, f"a --step of {named} seconds plays it ({which}; at its own {own_s:g}s "
                     f"step, which a --step up to it keeps, it has {own.value})", detail=own.detail) from own


def _plays_at(fine: Any, fmt: str, steps: np.ndarray) -> np.ndarray:
    """Whether the trace (`fine`: loaded at 1s) has two observed steps at each of `steps` (whole seconds, coarser
    than its own), as the loader resamples it: steps from the epoch, one observed where an observed time falls. A 1s
    step lies within one whole --step, so the trace's time in 1s steps falls in the --step its time does. A csv or
    ServeGen trace has two where its first and last observed times fall in two; a requests log's steps run from its
    first to its last request, all observed but its last and, unless its first request starts it, its first."""
    if fmt != "requests":
        observed = fine.dropna().index
        first, last = (int(t.timestamp()) for t in (observed[0], observed[-1]))
        return first // steps != last // steps
    first, last = (int(t.timestamp()) for t in (fine.index[0], fine.index[-1]))
    starts_it = (first % steps == 0) & bool(np.isfinite(fine.iloc[0]))
    return last // steps - first // steps - np.where(starts_it, 0, 1) >= 2


def _at_own_step(path: str, fmt: str) -> tuple[Any, InputError | None]:
    """The trace loaded at its own step, else the loader's refusal of it (then None for the trace)."""
    from balancer.forecast.traces import load_demand

    try:
        return load_demand(path, fmt), None
    except InputError as refusal:
        return None, refusal


def _loaded_or_none(path: str, fmt: str, step: str) -> Any:
    """The trace loaded at `step`, None where the loader refuses it (the refusal at --step is then its own)."""
    from balancer.forecast.traces import load_demand

    try:
        return load_demand(path, fmt, step=step)
    except InputError:
        return None


def _too_few_steps(path: str, fmt: str, step_s: float, fine: Any) -> InputError:
    """--step refused for a trace (`fine`: loaded at a finer step) spanning under two of its steps. A csv or ServeGen
    trace's first and last observed times lie within its first and last observed steps, so they are more than its
    span less one own step apart: any --step of at most that falls on two steps (a 29 s trace at 1 s plays at 28;
    half its span, named before, kept 14 of them back); one spanning a single own step, whose span less that step
    is 0, plays at its own step (a 2-row trace at 1s was told it needed 'a trace spanning at least two --steps of at
    least 1s' where --step 1 plays it). A requests log's first and last steps, partly covered, are not observed, so
    it needs four: steps of at most a third of its span (its observed steps' plus the last step, which holds its
    last request)."""
    observed = fine.dropna().index
    own = _step_of(fine)
    span = float((observed[-1] - observed[0]).total_seconds()) + (own if fmt == "requests" else 0.0)
    if fmt == "requests":
        limit, why = span / 3, f"a third of the trace's {span:g}s span"
        detail = "a requests log's first and last steps, partly covered, are not observed"
    else:
        limit, why, detail = span - own, f"the trace's {span:g}s span less its own {own:g}s step", ""
    if limit < 1 and fmt != "requests":   # two observed steps (load_demand refuses fewer), one apart: --step own plays
        named = f"{math.floor(own * 1e6) / 1e6:.6f}".rstrip("0").rstrip(".")   # never past its own step (:g rounded up)
        return InputError(path, "--step", step_s, f"a --step of {named} seconds plays it (the trace's own step; it "
                          f"spans {span:g}s)")
    if limit < 1:
        return InputError(path, "--step", step_s, f"a trace spanning at least two --steps of at least 1s (this one "
                          f"spans {span:g}s)", detail=detail)
    return InputError(path, "--step", step_s, f"a --step of at most {math.floor(limit)} seconds plays it ({why})",
                      detail=detail)


def _step_of(y: Any) -> float:
    """The step a loaded trace is at (its own without a step: `own_step_s`; a requests log's 1 min): the gap between
    its first two steps, which `load_demand` always returns (it refuses a trace spanning fewer)."""
    return float(y.index[1].timestamp() - y.index[0].timestamp())


def demand_from_trace(path: str, peak: float, fmt: str = "csv",
                      step_s: float | None = None) -> Callable[[float], float]:
    """A demand curve from a trace (`load_trace_shape`), scaled so its maximum is `peak`, repeated over its span."""
    return load_trace_shape(path, fmt, step_s).demand(peak)


def _hotspot_setup(sim: SimCluster, *, days: float, seed: int, trace: str | None = None,
                   trace_format: str | None = None) -> list[Event]:
    n = sim.n_gpus
    n_services = 3
    per_service = max(1, round(n * 0.40 / n_services))
    rng = np.random.default_rng(seed)
    shape = load_trace_shape(trace, trace_format or "csv", sim.step_s) if trace else None
    for k in range(n_services):
        spec = ServiceSpec(name=f"llm-{k}", rps_a100=20.0, replicas=per_service, gpu_memory_mib=24576,
                           slo_latency_s=0.6)
        rate = float(np.mean([spec.rate_on(m) for m in sorted(set(sim.gpu_model.tolist()))]))
        peak = 0.5 * rate * per_service
        demand = (shape.demand(peak) if shape is not None else
                  TidalDemand(peak=peak, trough=0.25 * peak, peak_hour=13.0 + 2 * k, noise=0.03,
                              seed=seed + k))
        sim.add_service(ServiceSpec(name=spec.name, rps_a100=20.0, replicas=per_service, gpu_memory_mib=24576,
                                    slo_latency_s=0.6, demand=demand))
    free_target = max(2, round(n * 0.14))
    left = n - n_services * per_service - free_target
    n_jobs = 4
    for k in range(n_jobs):
        workers = left // n_jobs + (1 if k < left % n_jobs else 0)
        if workers <= 0:
            continue
        sim.add_training_job(TrainingJobSpec(name=f"train-{k}", workers=workers, elastic_min=max(1, workers // 2),
                                             gpu_memory_mib=int(rng.choice([30720, 40960])), priority=10))
    sim.schedule()
    # the air-cooled node with the most mixed load (inference next to training) gets the cooling fault
    classes: dict[int, set[str]] = {}
    for name, gpus in sim.placements.items():
        classes.setdefault(int(sim.node_index[gpus[0]]), set()).add(sim.workloads[name].workload_class)
    air = [i for i, nd in enumerate(sim.fleet.nodes) if nd.cooling == "air"] or list(range(len(sim.fleet.nodes)))
    node = sim.fleet.nodes[max(air, key=lambda i: (len(classes.get(i, ())), i))].name
    start = sim.time + 13.0 * HOUR
    return [Event(start, f"cooling of {node} degrades (inlet +15 C, resistance x1.8) for 6 h",
                  lambda s: s.degrade_cooling(node, inlet_rise_c=15.0, resistance_factor=1.8, duration_s=6 * HOUR))]


SCENARIOS: dict[str, Scenario] = {
    "hotspot": Scenario("hotspot", "a node's cooling degrades for six hours under a realistic load",
                        hotspot_fleet, _hotspot_setup, default_days=2.0),
}


def build(scenario: str, *, fleet: fleet_mod.Fleet | None = None, seed: int = 0, step_s: float = 60.0,
          days: float | None = None, trace: str | None = None, trace_format: str | None = None,
          setup_options: Mapping[str, Any] | None = None) -> tuple[SimCluster, list[Event], float]:
    """A fresh simulator set up for `scenario`, its fault events and the days to run.

    `trace_format` (csv, servegen, requests; default: guessed from `trace`, a folder is servegen, a file csv)
    reaches the setup as the keyword `trace_format`. Setups written before it existed keep working: one that
    spells it `fmt` gets it under that name; one that takes no format reads its trace its own way, and asking it
    for a format other than the guessed one is an InputError rather than silently ignored. `setup_options` are
    the scenario's own keywords (tidal's `checkpoint_on_sigterm`); one its setup does not take is an InputError.
    """
    sc = SCENARIOS.get(scenario)
    if sc is None:
        raise InputError(None, "--scenario", scenario, "one of " + ", ".join(sorted(SCENARIOS)))
    if trace_format is not None and trace_format not in TRACE_FORMATS:
        raise InputError(trace, "--format", trace_format, "one of " + ", ".join(TRACE_FORMATS))
    sim = SimCluster(fleet or sc.default_fleet(), seed=seed, step_s=step_s)
    days = sc.default_days if days is None else days
    extra = _format_keyword(sc, trace, trace_format)
    params = inspect.signature(sc.setup).parameters
    for key in setup_options or {}:
        if key not in params or key in ("sim", "days", "seed", "trace", "trace_format", "fmt"):
            raise InputError(None, "--" + key.replace("_", "-"), setup_options[key], f"no such option for {sc.name}")
    return sim, sc.setup(sim, days=days, seed=seed, trace=trace, **extra, **(setup_options or {})), days


def guess_trace_format(trace: str | None) -> str | None:
    """The trace format when none is given: a folder is ServeGen, any other path `timestamp,value` CSV."""
    if trace is None:
        return None
    return "servegen" if Path(trace).is_dir() else "csv"


def _format_keyword(sc: Scenario, trace: str | None, trace_format: str | None) -> dict[str, str | None]:
    guessed = guess_trace_format(trace)
    params = inspect.signature(sc.setup).parameters
    if "trace_format" in params or any(p.kind is p.VAR_KEYWORD for p in params.values()):
        return {"trace_format": trace_format or guessed}
    if "fmt" in params:
        return {"fmt": trace_format or guessed}
    if trace_format is not None and trace_format != guessed:
        raise InputError(trace, "--format", trace_format, f"no --format (scenario {sc.name} reads its trace as it is)")
    return {}


# ---- the harness -----------------------------------------------------------------------------------------------
def run_simulation(sim: SimCluster, policy_name: str, days: float, step_s: float, out_dir: str | Path, *,
                   on_step: Callable[[SimCluster, dict], None] | None = None,
                   extra_policies: Mapping[str, PolicyFactory] | None = None,
                   events: list[Event] | tuple[Event, ...] = (), scenario: str = "custom",
                   policy: BalancerPolicy | None = None, interval_s: float | None = None,
                   options: Mapping[str, Any] | None = None, plots: bool = True) -> dict[str, Any]:
    """Run `policy_name` on `sim` for `days`; write summary.json, timeseries.csv, audit.jsonl, plots."""
    registry = {**POLICIES, **(extra_policies or {})}
    if policy_name not in registry:
        raise InputError(None, "--policy", policy_name, "one of " + ", ".join(sorted(registry)))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    # a run that stops part-way (Ctrl-C, an error) must not leave an earlier run's summary beside its own audit:
    # summary.json is removed now and written last, once everything else is
    for stale in ("summary.json", "timeseries.csv"):
        (out / stale).unlink(missing_ok=True)
    audit = JsonlAudit(out / "audit.jsonl")
    (out / "audit.jsonl").write_text("")
    ctx = PolicyContext(policy=policy or BalancerPolicy(), audit=audit, interval_s=interval_s or step_s,
                        options=options or {})
    controller = registry[policy_name](sim, ctx)
    pending = sorted(events, key=lambda e: e.time)
    rows: list[dict] = []
    end = sim.time + days * 86400.0
    try:
        while sim.time < end - 1e-9:
            while pending and pending[0].time <= sim.time:
                pending.pop(0).apply(sim)
            sim.step(step_s)
            controller.on_step(sim)
            row = _row(sim)
            rows.append(row)
            if on_step is not None:
                on_step(sim, row)
    finally:
        audit.close()
    summary = summarise(sim, policy_name, scenario, days, controller, out / "audit.jsonl")
    sc = SCENARIOS.get(scenario)
    if sc is not None and sc.summarise is not None:
        summary = sc.summarise(sim, summary)
    _write_csv(out / "timeseries.csv", rows)
    if plots:
        from balancer.app.plots import plot_timeseries

        plot_timeseries(rows, out, title=f"{scenario} / {policy_name}")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    return summary


def _row(sim: SimCluster) -> dict:
    status = sim.service_status()
    online = sim.online
    return {
        "time": sim.time,
        "temperature_max_c": float(sim.temperature_c[online].max()) if online.any() else math.nan,
        "temperature_mean_c": float(sim.temperature_c[online].mean()) if online.any() else math.nan,
        "gpus_at_slowdown": int((sim.temperature_c >= sim.slowdown_temp_c - 0.5).sum()),
        "power_kw": float(sim.power_w.sum()) / 1000.0,
        "throttled_gpus": int((sim.power_limit_w < sim.tdp_w - 1).sum()),
        "sm_active_mean": float(sim.sm_active[online].mean()) if online.any() else 0.0,
        "allocated_gpus": float(sim.used_milli.sum()) / 1000.0,
        "demand_rps": sum(s.demand_rps for s in status.values()),
        # no service: no latency to measure (NaN, an empty cell), never 0, which reads as every request instant
        "p99_over_slo_max": max((s.p99_latency_s / s.slo_latency_s for s in status.values()), default=math.nan),
        "pending": len(sim.pending),
    }


def _write_csv(path: Path, rows: list[dict]) -> None:
    with open(path, "w", newline="") as fh:
        if rows:
            w = csv.DictWriter(fh, fieldnames=list(rows[0]))
            w.writeheader()
            w.writerows(rows)


def summarise(sim: SimCluster, policy_name: str, scenario: str, days: float, controller: SimController,
              audit_path: Path) -> dict[str, Any]:
    st = sim.stats()
    inf, tr = st["inference"].values(), st["training"].values()
    requests = sum(s["requests"] for s in inf)
    violations = sum(s["slo_violations"] for s in inf)
    actions: dict[str, int] = {"migrate": 0, "power_limit": 0, "scale_training": 0, "scale_inference": 0,
                               "taint_node": 0, "rejected": 0}
    for line in audit_path.read_text().splitlines():
        rec = json.loads(line)
        if rec["outcome"] in ("applied", "dry_run"):
            actions[rec["action"]] = actions.get(rec["action"], 0) + 1
        elif str(rec["outcome"]).startswith("rejected"):
            actions["rejected"] += 1
    # a run without a reconcile cycle (policy none) measured no reconcile time: None (null), never 0 ms, which
    # read as an instant controller beside gputide's; the services' latency is the timeseries' p99_over_slo_max
    ms = np.array(controller.reconcile_seconds) * 1000.0
    p50, p99 = (float(v) for v in np.percentile(ms, [50, 99])) if ms.size else (None, None)
    return {
        "policy": policy_name, "scenario": scenario, "days": days, "gpus": sim.n_gpus,
        "inference": {"slo_attainment": 1.0 - violations / requests if requests else 1.0,
                      "requests": requests, "gpu_hours": sum(s["gpu_seconds"] for s in inf) / HOUR},
        "training": {"gpu_hours": sum(s["gpu_seconds"] for s in tr) / HOUR,
                     "progress": sum(s["progress_gpu_hours"] for s in tr),
                     "preemptions": sum(s["preemptions"] for s in tr),
                     "lost_work_gpu_hours": sum(s["lost_work_gpu_hours"] for s in tr),
                     "max_wait_hours": st["pending"]["max_wait_s"] / HOUR},
        "cluster": {"allocation_ratio": st["allocation_ratio"], "sm_active_mean": st["sm_active_mean"],
                    "energy_kwh": st["energy_kwh"]},
        "thermal": {"gpu_seconds_above_slowdown": st["gpu_seconds_above_slowdown"],
                    "max_temperature_c": st["max_temperature_c"]},
        "actions": actions,
        "controller": {"reconcile_p50_ms": p50, "reconcile_p99_ms": p99, "cycles": int(ms.size)},
    }
