"""Simulate a plan on a copy of the snapshot, with the same projection code the planners use for their gains.

A `Projection` holds per-GPU working arrays copied from a snapshot (milli-GPUs and memory reserved, power,
power limit, a projected temperature) plus where each workload runs. Applying an action updates those arrays
the way the action would change the cluster, after checking the hard constraints:

* nothing over-committed: a GPU's milli-GPUs stay <= 1000 and its memory <= its total;
* no action leaves a workload without a place to run: a migration's target must fit (it is reserved before the
  source is released), scale-downs respect the job's elastic minimum;
* a resize names a training job the snapshot knows: one with workers placed, or one it lists suspended (0 workers,
  `ClusterSnapshot.suspended_jobs`), whose resume is a growth from 0 to at least the minimum listed there;
* a power limit stays within the GPU's [minimum, TDP] range.

Temperatures use a first-order thermal model fitted to what the GPU shows now: an effective thermal resistance
``R = (T - inlet) / P`` (never below the catalogue's), so a node whose cooling degraded shows a higher R and the
projection moves its temperature by ``R * dP`` when power moves. The objective (lower is better) adds, in
"degrees over the hot line" units: thermal excess, hot nodes left untainted, throttled capacity, shrunk
training, SLO pressure and a small cost per migration. `simulate_plan` keeps an action only if it fits and
lowers the objective, so a plan is never worse than doing nothing; the measured change is the action's
`expected_gain`.

Trying a proposal must not cost O(fleet): a fleet with 1 % of its nodes hot has proposals in proportion to its
size, so copying the per-GPU arrays per proposal made a cycle O(n^2). Instead the projection keeps an undo log:
`checkpoint()` marks it, `apply` records the old value of every element, dict entry and set member it writes, and
`rollback(mark)` puts them back. The objective's terms are kept as running totals updated from the elements an
action touches (`running_objective()`), so measuring a proposal costs what the action touches, not what the
fleet holds; `objective()` still recomputes everything from the arrays. A property test keeps the original
clone-per-proposal path (`clone()` is kept for it) and checks both keep the same actions with the same gains.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from balancer.config import BalancerPolicy
from balancer.model import (
    Action,
    ClusterSnapshot,
    Migrate,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
    Workload,
    WorkloadClass,
)
from balancer.noderules import Taint
from balancer.plan.columns import effective_resistance, gpu_usage, model_arrays

HOT_TAINT = "gputide.io/hot"
THERMAL_BITS = 0x20 | 0x40  # NVML SW / HW thermal slowdown
# objective weights, in degrees-over-the-hot-line equivalents
W_UNTAINTED_HOT_NODE = 1.0
W_NEEDLESS_TAINT = 0.5
W_THROTTLE = 4.0          # per GPU throttled to 0% of TDP (linear in the fraction removed)
W_TRAINING_WORKER = 3.0   # per training worker shrunk away
W_SLO = 50.0              # per unit of p99/SLO above the pressure line
MIGRATION_COST = 0.3
INTERFERENCE_RELIEF = 0.3  # latency share attributed to a co-located training worker


def hot_tainted(snapshot: ClusterSnapshot) -> set[str]:
    """Nodes carrying gputide's hot taint (any value/effect spelling: `gputide.io/hot=true:NoSchedule`)."""
    return {n.name for n in snapshot.nodes if any(Taint.parse(t).key == HOT_TAINT for t in n.taints)}


_MISSING = object()
# running totals and counters that a rollback restores as a whole (cheaper than logging every update)
_SCALARS = ("migrations", "shrunk_workers", "_thermal", "_throttle", "_untainted", "_needless", "_slo")


def _undo_array(arr: np.ndarray, idx: np.ndarray | int, old: np.ndarray) -> None:
    arr[idx] = old


def _undo_item(d: dict, key: object, old: object) -> None:
    if old is _MISSING:
        d.pop(key, None)
    else:
        d[key] = old


def _undo_member(s: set, item: object, present: bool) -> None:
    (s.add if present else s.discard)(item)


class Projection:
    """Working copy of a snapshot that actions are applied to (never the snapshot itself)."""

    def __init__(self, snapshot: ClusterSnapshot, policy: BalancerPolicy,
                 hot_nodes: Iterable[str] = (), tainted: Iterable[str] | None = None,
                 desired_workers: Mapping[str, int] | None = None) -> None:
        s = snapshot
        self.snapshot = s
        self.policy = policy
        m = model_arrays(s)
        self.tdp, self.pmin, self.idle = m["tdp"], m["pmin"], m["idle"]
        self.node_of = s.node_index
        inlet = np.array([n.inlet_c for n in s.nodes], dtype=float)[self.node_of]
        power = np.maximum(s.power_w, self.idle)
        self.r = effective_resistance(s, inlet, power, m["r"], self.tdp)
        self.hot_line = s.slowdown_temp_c - policy.hotspots.margin_c
        self.temp = np.maximum(s.temperature_c, inlet + self.r * power)  # projected steady temperature
        # a GPU in thermal slowdown is held down by its regulator: it is at least at its slowdown temperature
        thermal = (s.clock_event_reasons.astype(np.int64) & THERMAL_BITS) != 0
        self.temp = np.where(thermal, np.maximum(self.temp, s.slowdown_temp_c), self.temp)
        self.power = power.copy()
        self.limit = np.clip(s.power_limit_w, self.pmin, self.tdp)
        self.milli, declared, self.workers = gpu_usage(s)
        # a job suspended to 0 workers has no pods, so no placement counts it; the snapshot lists it
        # (`ClusterSnapshot.suspended_jobs`) and it is known here with 0 workers: its resume (0 -> k) fits. Counted
        # from the placements alone, the loop's check on the fresh snapshot refused every resume as "no such training
        # job" (stale_plan), and a job the capacity planner suspended never grew back
        for job in s.suspended_jobs or ():
            self.workers.setdefault(job.name, 0)
        self.mem = np.maximum(declared, s.mem_used_mib.astype(float))
        self.mem_total = s.mem_total_mib.astype(float)
        self.placements = dict(s.placements)
        # the size each job should have: its current size, or what it had before we shrank it
        self.base_workers = {j: max(n, (desired_workers or {}).get(j, 0)) for j, n in self.workers.items()}
        for j, n in (desired_workers or {}).items():
            self.workers.setdefault(j, 0)
            self.base_workers.setdefault(j, n)
        self.shrunk_workers = sum(max(b - self.workers[j], 0) for j, b in self.base_workers.items())
        self.tainted = set(tainted) if tainted is not None else hot_tainted(s)
        self.hot_nodes = set(hot_nodes)
        self.migrations = 0
        # a p99 unknown (NaN: `serving.LATENCY_UNKNOWN`) has no ratio: NaN would make the whole objective NaN
        self.slo_ratio = {k: v.p99_latency_s / v.slo_latency_s for k, v in s.services.items()
                          if v.slo_latency_s > 0 and not math.isnan(v.p99_latency_s)}
        self._log: list[tuple] | None = None   # undo entries while a checkpoint is open
        self._moved: set[str] = set()          # workloads this projection migrated
        self._sharing: dict[int, list[tuple[str, str]]] | None = None
        self._reset_totals()

    def _reset_totals(self) -> None:
        """Running objective terms, recomputed from the arrays (see `running_objective`)."""
        self._thermal = float(np.maximum(self.temp - self.hot_line, 0.0).sum())
        self._throttle = float(((self.tdp - self.limit) / self.tdp).sum())
        self._untainted = len(self.hot_nodes - self.tainted)
        self._needless = len(self.tainted - self.hot_nodes)
        pressure = self.policy.colocation.slo_pressure
        self._slo = sum(max(r - pressure, 0.0) for r in self.slo_ratio.values())

    # -- undo log ---------------------------------------------------------------------------------------------------
    def checkpoint(self) -> tuple[int, tuple]:
        """Start (or extend) the undo log; `rollback` to the returned mark undoes everything applied since."""
        if self._log is None:
            self._log = []
        return len(self._log), tuple(getattr(self, k) for k in _SCALARS)

    def rollback(self, mark: tuple[int, tuple]) -> None:
        n, scalars = mark
        log = self._log or []
        while len(log) > n:
            fn, *args = log.pop()
            fn(*args)
        for k, v in zip(_SCALARS, scalars, strict=True):
            setattr(self, k, v)

    def _put(self, arr: np.ndarray, idx: np.ndarray | int, values: np.ndarray | float) -> None:
        if self._log is not None:
            self._log.append((_undo_array, arr, idx, np.copy(arr[idx])))
        arr[idx] = values

    def _set_item(self, d: dict, key: object, value: object) -> None:
        if self._log is not None:
            self._log.append((_undo_item, d, key, d.get(key, _MISSING)))
        d[key] = value

    def _set_member(self, s: set, item: object, present: bool) -> None:
        if (item in s) == present:
            return
        if self._log is not None:
            self._log.append((_undo_member, s, item, not present))
        (s.add if present else s.discard)(item)

    # -- objective ------------------------------------------------------------------------------------------------
    def objective(self) -> float:
        thermal = float(np.maximum(self.temp - self.hot_line, 0.0).sum())
        taints = (W_UNTAINTED_HOT_NODE * len(self.hot_nodes - self.tainted)
                  + W_NEEDLESS_TAINT * len(self.tainted - self.hot_nodes))
        throttle = W_THROTTLE * float(((self.tdp - self.limit) / self.tdp).sum())
        shrunk = W_TRAINING_WORKER * self.shrunk_workers
        pressure = self.policy.colocation.slo_pressure
        slo = W_SLO * sum(max(r - pressure, 0.0) for r in self.slo_ratio.values())
        return thermal + taints + throttle + shrunk + slo + MIGRATION_COST * self.migrations

    def running_objective(self) -> float:
        """`objective()` from running totals: O(1), equal to it up to float rounding."""
        return (self._thermal + W_UNTAINTED_HOT_NODE * self._untainted + W_NEEDLESS_TAINT * self._needless
                + W_THROTTLE * self._throttle + W_TRAINING_WORKER * self.shrunk_workers + W_SLO * self._slo
                + MIGRATION_COST * self.migrations)

    # -- power and temperature ------------------------------------------------------------------------------------
    def workload_power(self, name: str) -> float:
        """Estimated watts a workload adds to each of its GPUs (its milli share of the GPU's dynamic power)."""
        w = self.snapshot.workload_by_name[name]
        g = np.asarray(self.placements[name])
        share = w.gpu_milli / np.maximum(self.milli[g], 1)
        return float(((self.power[g] - self.idle[g]) * np.minimum(share, 1.0)).mean())

    def _set_power(self, gpus: np.ndarray, power: np.ndarray) -> None:
        power = np.minimum(np.maximum(power, self.idle[gpus]), self.limit[gpus])
        u = np.unique(gpus)
        before = float(np.maximum(self.temp[u] - self.hot_line[u], 0.0).sum())
        self._put(self.temp, gpus, self.temp[gpus] + self.r[gpus] * (power - self.power[gpus]))
        self._put(self.power, gpus, power)
        self._thermal += float(np.maximum(self.temp[u] - self.hot_line[u], 0.0).sum()) - before

    # -- actions ----------------------------------------------------------------------------------------------------
    def apply(self, action: Action) -> str | None:
        """Apply one action; return None when it fits, or why it breaks a constraint (nothing changed then)."""
        if isinstance(action, Migrate):
            return self._migrate(action)
        if isinstance(action, SetPowerLimit):
            return self._power_limit(action)
        if isinstance(action, ScaleTraining):
            return self._scale_training(action)
        if isinstance(action, TaintNode):
            self._taint(action.node, not action.remove)
            return None
        if isinstance(action, ScaleInference):
            return None if action.replicas >= 0 else "negative replicas"
        return f"unknown action {action.kind}"

    def _taint(self, node: str, present: bool) -> None:
        if (node in self.tainted) == present:
            return
        self._set_member(self.tainted, node, present)
        step = -1 if present else 1   # tainting a hot node fixes it; tainting a cool one is needless
        if node in self.hot_nodes:
            self._untainted += step
        else:
            self._needless -= step

    def _power_limit(self, a: SetPowerLimit) -> str | None:
        if not 0 <= a.gpu < len(self.limit):
            return "no such GPU"
        g = a.gpu
        if not self.pmin[g] - 1e-6 <= a.watts <= self.tdp[g] + 1e-6:
            return f"power limit {a.watts:.0f} W outside [{self.pmin[g]:.0f}, {self.tdp[g]:.0f}]"
        capped = self.power[g] >= self.limit[g] - 1.0
        # a capped GPU wants more than it gets: assume it would draw 90% of TDP when the cap is lifted
        demand = max(self.power[g], 0.9 * self.tdp[g]) if capped else self.power[g]
        self._throttle += (self.tdp[g] - a.watts) / self.tdp[g] - (self.tdp[g] - self.limit[g]) / self.tdp[g]
        self._put(self.limit, g, a.watts)
        self._set_power(np.array([g]), np.array([demand]))
        return None

    def _migrate(self, a: Migrate) -> str | None:
        w = self.snapshot.workload_by_name.get(a.workload)
        if w is None or a.workload not in self.placements:
            return "workload is not running"
        if tuple(self.placements[a.workload]) != tuple(a.source_gpus):
            return "workload is no longer on its source GPUs"
        t = np.asarray(a.target_gpus, dtype=np.int64)
        if (len(t) != len(a.source_gpus) or len(set(a.target_gpus)) != len(t) or t.min(initial=0) < 0
                or t.max(initial=0) >= len(self.milli)):
            return "invalid target GPUs"
        gpus = self.snapshot.gpus
        if any(gpus[i].node != a.target_node for i in a.target_gpus):   # planned on a fleet listed otherwise
            return f"target GPUs are not on {a.target_node} in this snapshot (the fleet's nodes changed)"
        if not all(w.fits_model(gpus[i].model) for i in a.target_gpus):
            return "target GPU model not allowed"
        if set(a.target_gpus) & set(a.source_gpus):
            return "target overlaps source"
        if np.any(self.milli[t] + w.gpu_milli > 1000) or np.any(self.mem[t] + w.gpu_memory_mib > self.mem_total[t]):
            return "target does not fit (GPU or memory over-committed)"
        watts = self.workload_power(a.workload)
        src = np.asarray(a.source_gpus, dtype=np.int64)
        # reserve the target first, then release the source: the workload always has a place to run
        self._put(self.milli, t, self.milli[t] + w.gpu_milli)
        self._put(self.mem, t, self.mem[t] + w.gpu_memory_mib)
        self._set_power(t, self.power[t] + watts * float(self.tdp[t].mean() / max(self.tdp[src].mean(), 1.0)))
        self._put(self.milli, src, self.milli[src] - w.gpu_milli)
        self._put(self.mem, src, np.maximum(self.mem[src] - w.gpu_memory_mib, 0.0))
        self._set_power(src, self.power[src] - watts)
        self._set_item(self.placements, a.workload, tuple(a.target_gpus))
        self._set_member(self._moved, a.workload, True)
        self.migrations += 1
        return None

    def _scale_training(self, a: ScaleTraining) -> str | None:
        current = self.workers.get(a.job)
        if current is None:
            return "no such training job"
        members = [w for w in self.snapshot.workloads_by_owner.get(a.job, ()) if w.name in self.placements]
        # a job with no worker placed (suspended, `ClusterSnapshot.suspended_jobs`) has its minimum in its listing:
        # a resume below it would start a job that cannot run
        if members:
            floor = min(w.elastic_min for w in members)
        else:   # looked up only then: before, the listing was scanned on every resize of a job with workers placed
            suspended = self.snapshot.suspended_by_name.get(a.job)
            floor = suspended.elastic_min if suspended else 0
        if a.workers < floor and a.workers != 0:
            return f"below the job's elastic minimum ({floor})"
        base = self.base_workers.get(a.job, current)
        self.shrunk_workers += max(base - a.workers, 0) - max(base - current, 0)
        if a.workers > current:
            # growth: capacity is the scheduler's business; no projection
            self._set_item(self.workers, a.job, a.workers)
            return None
        drop = current - a.workers
        if drop and members:
            frac = drop / current  # which workers go is the job's choice: spread the relief evenly
            for w in members:
                g = np.asarray(self.placements[w.name])
                self._set_power(g, self.power[g] - frac * self.workload_power(w.name))
            pressure = self.policy.colocation.slo_pressure
            for svc in self._services_sharing(members):
                old = self.slo_ratio[svc]
                new = old * (1.0 - INTERFERENCE_RELIEF * frac)
                self._slo += max(new - pressure, 0.0) - max(old - pressure, 0.0)
                self._set_item(self.slo_ratio, svc, new)
        self._set_item(self.workers, a.job, a.workers)
        return None

    def _services_sharing(self, members: Sequence[Workload]) -> set[str]:
        """Services (with an SLO) that have an inference workload on a GPU of `members`, where they run now."""
        if not self.slo_ratio:
            return set()
        if self._sharing is None:   # GPU -> (name, service) of inference workloads, as the snapshot placed them
            self._sharing = {}
            for w in self.snapshot.workloads:
                if w.workload_class == WorkloadClass.INFERENCE and w.owner in self.slo_ratio:
                    for g in self.snapshot.placements.get(w.name, ()):
                        self._sharing.setdefault(g, []).append((w.name, w.owner))
        gpus = {g for w in members for g in self.placements[w.name]}
        cands = {c for g in gpus for c in self._sharing.get(g, ())}
        # a workload this projection migrated may sit on these GPUs now (its snapshot entry is re-checked below)
        for name in self._moved:
            w = self.snapshot.workload_by_name[name]
            if w.workload_class == WorkloadClass.INFERENCE and w.owner in self.slo_ratio:
                cands.add((name, w.owner))
        return {owner for name, owner in cands if gpus.intersection(self.placements.get(name, ()))}

    def clone(self) -> Projection:
        q = Projection.__new__(Projection)
        q.__dict__.update(self.__dict__)
        for k in ("temp", "power", "limit", "milli", "mem"):
            setattr(q, k, getattr(self, k).copy())
        q.placements = dict(self.placements)
        q.workers = dict(self.workers)
        q.tainted = set(self.tainted)
        q.slo_ratio = dict(self.slo_ratio)
        q._moved = set(self._moved)
        q._log = None
        return q


@dataclass(frozen=True)
class SimulationResult:
    kept: tuple[Action, ...]
    dropped: tuple[tuple[Action, str], ...]
    objective_before: float
    objective_after: float


def simulate_plan(snapshot: ClusterSnapshot, actions: Sequence[Action], policy: BalancerPolicy, *,
                  hot_nodes: Iterable[str] = (), tainted: Iterable[str] | None = None,
                  projection: Projection | None = None) -> SimulationResult:
    """Apply `actions` in order to a projection; keep those that fit and improve the objective.

    Each action is applied in place and rolled back from the undo log when it does not fit or does not help;
    a `projection` passed in is left as it came.
    """
    proj = projection or Projection(snapshot, policy, hot_nodes, tainted)
    start = proj.checkpoint()
    before = proj.objective()
    current = running = proj.running_objective()
    kept: list[Action] = []
    dropped: list[tuple[Action, str]] = []
    for action in actions:
        mark = proj.checkpoint()
        why = proj.apply(action)
        if why is not None:
            proj.rollback(mark)
            dropped.append((action, why))
            continue
        after = proj.running_objective()
        gain = running - after
        if gain <= 1e-9:
            proj.rollback(mark)
            dropped.append((action, f"does not improve the objective ({current:.3g} -> {current - gain:.3g})"))
            continue
        kept.append(replace(action, expected_gain=round(gain, 6)))
        running, current = after, current - gain
    if projection is not None:
        proj.rollback(start)
        proj._log = None
    return SimulationResult(tuple(kept), tuple(dropped), before, current)

