"""The soak's invariants, checked from the outside while the controller runs.

Each checker watches one promise the controller makes and records every breach with the cycle it happened in;
the soak prints one row per checker at the end (`Invariants.table()`), and all must hold:

* `WorkloadLedger`  no workload lost or left without a place: before and after every action the simulator's
                    workloads are each either placed or pending (never both, never neither); an action changes
                    only what it names (a migration keeps its workload, a scale changes only its owner's pods);
                    between cycles, a workload may only disappear because its training job finished.
* `StaleGuard`      no action on stale data: every action the actuator receives comes with a snapshot that passes
                    the fail-static gate (`check_telemetry`), taken moments before (wall age recorded).
* `BudgetCheck`     no budget exceeded, recomputed independently of the controller's own ledger (which a restart
                    loses): actions per cycle, migrations in flight per node, evictions per window. An action's
                    evictions are counted by the guard's own rule (`safety.count_evictions`: every running worker
                    of a job that restarts whole on a resize, only the running replicas a scale-down stops), so the
                    soak checks the budget the guard enforces.
* `MemoryTrend`     the process's resident memory sampled every cycle, settled first (`settled_rss_mib`: a full
                    collection and glibc's `malloc_trim`, so memory freed but kept by the allocator is not counted as
                    growth); the slope after warm-up (and, on long runs, over the last day), fitted by Theil-Sen,
                    must stay under a threshold (MiB per simulated day). The process also holds the harness
                    (simulator, exporter, in-test Kubernetes API, the checkers' records), so the slope is an upper
                    bound on the controller's own.
* alerts            are tracked by `balancer.app.soak_faults.AlertTracker`.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np
from scipy.stats import theilslopes

from balancer.config import SafetyPolicy
from balancer.errors import TelemetryError
from balancer.model import Action, ClusterSnapshot, Migrate, ScaleInference, ScaleTraining
from balancer.safety import action_limit, check_telemetry, count_evictions
from balancer.sim import SimCluster


@dataclass
class Check:
    """One invariant: how many times it was checked and every breach (cycle, message)."""

    name: str
    promise: str
    checked: int = 0
    breaches: list[tuple[int, str]] = field(default_factory=list)
    detail: str = ""

    @property
    def held(self) -> bool:
        return self.checked > 0 and not self.breaches

    def breach(self, cycle: int, message: str) -> None:
        if len(self.breaches) < 50:  # keep the first ones; the count is what the table shows
            self.breaches.append((cycle, message))

    def row(self) -> dict:
        return {"invariant": self.name, "promise": self.promise, "checked": self.checked,
                "breaches": len(self.breaches), "held": self.held, "detail": self.detail,
                "first_breaches": [f"cycle {c}: {m}" for c, m in self.breaches[:5]]}


def _state(sim: SimCluster) -> tuple[dict[str, str], dict[str, tuple[int, ...]], set[str]]:
    owners = {name: (w.owner or name) for name, w in sim.workloads.items()}
    return owners, dict(sim.placements), set(sim.pending)


class WorkloadLedger:
    def __init__(self, sim: SimCluster) -> None:
        self.sim = sim
        self.check = Check("no workload lost or without a place",
                           "every workload placed or pending; an action changes only what it names")
        self._between = self._snapshot()

    def _snapshot(self) -> tuple[dict[str, str], dict[str, tuple[int, ...]], set[str]]:
        return _state(self.sim)

    def _structure(self, cycle: int, state, when: str) -> None:
        owners, placed, pending = state
        both = set(placed) & pending
        nowhere = set(owners) - set(placed) - pending
        if both:
            self.check.breach(cycle, f"{when}: {sorted(both)[:3]} both placed and pending")
        if nowhere:
            self.check.breach(cycle, f"{when}: {sorted(nowhere)[:3]} neither placed nor pending")

    def before_action(self):
        return self._snapshot()

    def after_action(self, cycle: int, action: Action, before) -> None:
        after = self._snapshot()
        self.check.checked += 1
        self._structure(cycle, after, f"after {action.kind}")
        b_owner, b_placed, _ = before
        a_owner, a_placed, _ = after
        allowed = {getattr(action, "job", None) or getattr(action, "service", None)} - {None}
        gone = set(b_owner) - set(a_owner)
        new = set(a_owner) - set(b_owner)
        if isinstance(action, ScaleTraining | ScaleInference):
            bad = {n for n in gone | new if (b_owner.get(n) or a_owner.get(n)) not in allowed}
        else:
            bad = gone | new
        if bad:
            self.check.breach(cycle, f"{action.describe()} added/removed {sorted(bad)[:3]}")
        moved = {n for n in set(b_placed) & set(a_placed) if b_placed[n] != a_placed[n]}
        unplaced = {n for n in set(b_placed) - set(a_placed) if n in a_owner}
        if isinstance(action, Migrate):
            moved.discard(action.workload)
        else:
            unplaced = {n for n in unplaced if a_owner.get(n) not in allowed}
        if moved or unplaced:
            self.check.breach(cycle, f"{action.describe()} moved {sorted(moved)[:3]} unplaced {sorted(unplaced)[:3]}")
        if isinstance(action, Migrate) and action.workload in b_placed and action.workload not in a_placed:
            self.check.breach(cycle, f"{action.workload} lost its place during its migration")
        self._between = after   # what the action legitimately changed is the new baseline

    def after_cycle(self, cycle: int) -> None:
        """Between cycles the simulator ran on its own: only finished training jobs may take workloads away."""
        now = self._snapshot()
        self.check.checked += 1
        self._structure(cycle, now, "after the simulator stepped")
        done = {j for k, j in enumerate(self.sim.training_jobs) if bool(self.sim.acct.job_done[k])}
        lost = {n for n in set(self._between[0]) - set(now[0]) if self._between[0][n] not in done}
        if lost:
            self.check.breach(cycle, f"{sorted(lost)[:3]} disappeared without their job finishing")
        self._between = now

    def finish(self, cycle: int, journal: Mapping[str, dict]) -> None:
        """At the end no migration may be left half-done in the shared journal."""
        self.check.checked += 1
        if journal:
            self.check.breach(cycle, f"migrations left half-done in the journal: {sorted(journal)[:3]}")

    def resync(self) -> None:
        """Faults that change the simulator on purpose (a node lost) re-baseline the between-cycle view."""
        self._between = self._snapshot()


class StaleGuard:
    def __init__(self, policy: SafetyPolicy) -> None:
        self.policy = policy
        self.check = Check("no action on stale data",
                           "every action's snapshot passed the fail-static gate and was fresh")
        self.max_sample_age_s = 0.0
        self.max_snapshot_wall_age_s = 0.0

    def on_action(self, cycle: int, action: Action, snapshot: ClusterSnapshot) -> None:
        self.check.checked += 1
        try:
            age = check_telemetry(snapshot, self.policy)
        except TelemetryError as exc:
            self.check.breach(cycle, f"{action.describe()} acted on a snapshot the gate refuses: {exc}")
            return
        wall_age = max(time.time() - snapshot.time, 0.0)
        self.max_sample_age_s = max(self.max_sample_age_s, age)
        self.max_snapshot_wall_age_s = max(self.max_snapshot_wall_age_s, wall_age)
        if wall_age > self.policy.max_telemetry_age_s:
            self.check.breach(cycle, f"{action.describe()} used a snapshot taken {wall_age:.0f} s before")
        self.check.detail = (f"oldest sample acted on {self.max_sample_age_s:.1f} s; "
                             f"oldest snapshot {self.max_snapshot_wall_age_s:.2f} s")


class BudgetCheck:
    def __init__(self, policy: SafetyPolicy) -> None:
        self.p = policy
        self.check = Check("no budget exceeded",
                           "actions/cycle, migrations in flight per node, evictions per window (all replicas)")
        self._per_cycle: dict[int, int] = {}
        self._migrations: list[tuple[float, frozenset[str]]] = []
        self._evictions: list[float] = []
        self.peak = {"actions_per_cycle": 0, "migrations_per_node": 0, "evictions_per_window": 0}

    def on_applied(self, cycle: int, now: float, action: Action, snapshot: ClusterSnapshot) -> None:
        p = self.p
        self.check.checked += 1
        counted, refusable = action_limit(action)   # a renewal is not counted; a reclaim counts, never refused
        self._per_cycle[cycle] = n = self._per_cycle.get(cycle, 0) + counted
        self._per_cycle = {c: k for c, k in self._per_cycle.items() if c >= cycle - 1}
        self.peak["actions_per_cycle"] = max(self.peak["actions_per_cycle"], n)
        if refusable and n > p.max_actions_per_cycle:
            self.check.breach(cycle, f"{n} actions in one cycle (limit {p.max_actions_per_cycle})")
        if isinstance(action, Migrate):
            nodes = frozenset({snapshot.gpus[action.source_gpus[0]].node, action.target_node})
            self._migrations = [m for m in self._migrations if now - m[0] < p.migration_settle_s]
            self._migrations.append((now, nodes))
            for node in nodes:
                k = sum(node in m[1] for m in self._migrations)
                self.peak["migrations_per_node"] = max(self.peak["migrations_per_node"], k)
                if k > p.max_concurrent_migrations_per_node:
                    self.check.breach(cycle, f"{k} migrations in flight on {node} "
                                             f"(limit {p.max_concurrent_migrations_per_node})")
        ev = count_evictions(action, snapshot)   # the guard's own count, on the snapshot the action was planned on
        if ev:
            self._evictions = [t for t in self._evictions if now - t < p.eviction_window_s] + [now] * ev
            self.peak["evictions_per_window"] = max(self.peak["evictions_per_window"], len(self._evictions))
            if len(self._evictions) > p.eviction_budget:
                self.check.breach(cycle, f"{len(self._evictions)} evictions in {p.eviction_window_s:.0f} s "
                                         f"(budget {p.eviction_budget})")
        self.check.detail = ", ".join(f"peak {k.replace('_', ' ')} {v}" for k, v in self.peak.items())


def rss_mib() -> float:
    """Resident set size of this process in MiB (Linux /proc; ru_maxrss elsewhere)."""
    try:
        with open("/proc/self/statm") as fh:
            return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 1048576
    except (OSError, ValueError, IndexError):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _malloc_trim() -> None:
    """glibc's malloc_trim(0): heap pages freed but kept by the allocator (every thread's arena) go back to the OS."""
    with contextlib.suppress(AttributeError, OSError):   # not glibc: the RSS then includes what the allocator keeps
        ctypes.CDLL(None).malloc_trim(0)


def settled_rss_mib() -> float:
    """RSS once garbage is freed and given back: a full collection, then `malloc_trim`. Raw RSS also holds garbage
    not collected yet and what glibc keeps of freed memory (an arena per thread; the HTTP servers run a thread per
    request): in the short soak raw RSS grew 9.1 MiB per simulated day after warm-up, settled RSS 5.7, same code."""
    gc.collect()
    _malloc_trim()
    return rss_mib()


def _theil_sen(pts: np.ndarray) -> float:
    """Theil-Sen slope of (x, y) rows: the median of the pairwise slopes; 0 where x does not vary."""
    return float(theilslopes(pts[:, 1], pts[:, 0]).slope) if np.ptp(pts[:, 0]) > 0 else 0.0


class MemoryTrend:
    def __init__(self, *, warmup_fraction: float = 0.25, max_mib_per_day: float = 8.0, late_days: float = 3.0) -> None:
        self.samples: list[tuple[float, float]] = []   # (simulated days, RSS MiB)
        self.warmup_fraction, self.late_days = warmup_fraction, late_days
        self.max_mib_per_day = max_mib_per_day
        self.check = Check("controller memory flat",
                           f"RSS slope after warm-up below {max_mib_per_day:g} MiB per simulated day (RSS settled by "
                           "gc and malloc_trim; the harness included)")

    def sample(self, sim_days: float) -> None:
        self.samples.append((sim_days, settled_rss_mib()))

    def finish(self, cycle: int) -> float:
        """Fit the slope (MiB / simulated day) over the samples after warm-up; record a breach if too steep.

        The slope is Theil-Sen's (the median of the pairwise slopes), not least squares': a leak grows with every
        cycle and moves every pair, while a one-off step (a thread's malloc arena, a cache filled once) near the
        end of a short run moved least squares past the limit under load (8.49 MiB/day in a 1-day soak that read
        flat elsewhere) and moves the median less (a step mid-run still reads as growth). Over a run of
        `late_days` or more after warm-up the last day is also fitted alone: a leak that begins late (a cache that
        starts growing on day 5) moves too few of the whole run's pairs to shift its median."""
        pts = np.array(self.samples, dtype=float)
        self.check.checked = len(pts)
        if len(pts) < 8:
            self.check.breach(cycle, f"only {len(pts)} memory samples")
            return float("nan")
        tail = pts[int(len(pts) * self.warmup_fraction):]
        slope = _theil_sen(tail)
        last_day = tail[tail[:, 0] >= tail[-1, 0] - 1.0]
        late = _theil_sen(last_day) if np.ptp(tail[:, 0]) >= self.late_days and len(last_day) >= 8 else None
        self.check.detail = (f"RSS {pts[0, 1]:.0f} -> {pts[-1, 1]:.0f} MiB, after warm-up {tail[0, 1]:.0f} -> "
                             f"{tail[-1, 1]:.0f} MiB, slope {slope:+.2f} MiB/day"
                             + (f", last day {late:+.2f}" if late is not None else "")
                             + " (settled RSS, harness included)")
        if slope > self.max_mib_per_day:
            self.check.breach(cycle, f"RSS grows {slope:.2f} MiB per simulated day after warm-up")
        if late is not None and late > self.max_mib_per_day:
            self.check.breach(cycle, f"RSS grows {late:.2f} MiB per simulated day over the last day")
        return slope


def markdown_table(rows: list[Mapping]) -> str:
    lines = ["| invariant | held | checks | breaches | detail |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['invariant']} | {'yes' if r['held'] else 'NO'} | {r['checked']} | {r['breaches']} | "
                     f"{r['detail']} |")
    return "\n".join(lines)
