"""What the fleet looks like, from a `ClusterSnapshot`, for the controller's metrics (`balancer.metrics`), in one
vectorised pass (`fleet_usage`):

* `gputide_capacity_gpus{class}`: GPUs by the class of the workloads on them. A GPU with any inference workload
  counts as `inference` (inference owns it; co-located training is a guest), one with only training or batch
  work as `training`, one with no workload as `idle`. `loaned` is the part of `training` that inference lent
  (as in `balancer.plan.capacity.CapacitySplit`), known only to a capacity planner: the loop passes it in.
* `gputide_fragmentation_ratio{modelName}` / `gputide_unallocatable_gpus{modelName}` (the GPUs' NVML modelName,
  as on the DCGM series, not the catalogue key): FGD's expected
  fragmentation (`balancer.plan.defrag.fragmentation_by_model`) of the snapshot's free GPU, CPU and memory
  against the workload mix the snapshot shows (every workload, placed or pending, grouped by GPU shape).
* waiting training jobs: a job waits while fewer of its workers are placed than it needs to run (its elastic
  minimum, at least one). How long it has waited is the loop's business (it remembers when it first saw it).
* `gputide_shrunk_workers{cause}` (`owed_workers`, summed over jobs): the workers gputide took from training jobs and
  still owes back, by the planner that took them (`hotspot`, `colocation`), from the shrinks the planner state holds
  owed; `owed_workers` says which jobs owe them (the loop times each job's debt for `gputide_shrunk_longest_seconds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np

from balancer.model import ClusterSnapshot, WorkloadClass
from balancer.plan.fleet_state import column, snapshot_state
from balancer.plan.fleet_state import workload_mix as workload_mix  # re-exported: the metrics' tests read it
from balancer.plan.shrink_records import runnable


@dataclass(frozen=True)
class FleetUsage:
    capacity: dict[str, int]                                  # inference, training, idle (loaned is not seen here)
    fragmentation: dict[str, dict[str, float]]                # model -> fragmentation_ratio, unallocatable_gpus, ...
    waiting_jobs: frozenset[str] = field(default_factory=frozenset)


def fleet_usage(s: ClusterSnapshot) -> FleetUsage:
    """Capacity by class, fragmentation per GPU model and waiting training jobs (see the module docstring)."""
    view = snapshot_state(s)
    cols = view.cols
    per_gpu = np.repeat(np.arange(len(s.workloads)), cols.counts)   # workload of each (workload, GPU) pair
    has_inf = np.bincount(cols.idx[cols.cls[per_gpu] == 0], minlength=s.n_gpus) > 0
    has_any = np.bincount(cols.idx, minlength=s.n_gpus) > 0
    capacity = {"inference": int(has_inf.sum()), "training": int((has_any & ~has_inf).sum()),
                "idle": int((~has_any).sum())}
    return FleetUsage(capacity=capacity, fragmentation=view.fragmentation,
                      waiting_jobs=_waiting(s.workloads, cols.cls == 1, view.placed))


def waiting_training_jobs(s: ClusterSnapshot) -> frozenset[str]:
    """Training jobs with fewer placed workers than they need to run (elastic minimum, at least one)."""
    ws = s.workloads
    training = np.fromiter((w.workload_class is WorkloadClass.TRAINING for w in ws), dtype=bool, count=len(ws))
    placed = np.fromiter(map(bool, map(s.placements.get, map(attrgetter("name"), ws), repeat(()))), dtype=bool,
                         count=len(ws))
    return _waiting(ws, training, placed)


def _waiting(ws, training: np.ndarray, placed: np.ndarray) -> frozenset[str]:
    rows = np.flatnonzero(training)
    members = [ws[i] for i in rows.tolist()]
    if not members:
        return frozenset()
    owners = [w.owner or w.name for w in members]
    code = {o: i for i, o in enumerate(dict.fromkeys(owners))}
    job = np.fromiter(map(code.__getitem__, owners), dtype=np.int64, count=len(owners))
    need = np.ones(len(code), dtype=np.int64)
    np.maximum.at(need, job, column(members, "elastic_min"))
    have = np.bincount(job, weights=placed[rows], minlength=len(code))
    names = list(code)
    return frozenset(names[j] for j in np.flatnonzero(have < need).tolist())


SHRINK_CAUSES = ("hotspot", "colocation")


def owed_workers(s: ClusterSnapshot, hotspot: Mapping[str, int],
                 colocation: Mapping[str, tuple[int, str]]) -> dict[str, dict[str, int]]:
    """{cause: {job: workers owed back}}, jobs owing none left out: for each job a planner holds shrunk (`hotspot`:
    {job: workers before}, the planner state's `shrunk`; `colocation`: {job: (workers before, service)}), its
    workers before (at most what it can run now, `shrink_records.runnable`) less the pods it has now (placed or
    pending). A job both hold owes co-location's part first (its give-back comes first) and the hotspot's beyond it:
    shrunk 8 -> 7 by a hotspot, then 7 -> 5 by co-location, it owes colocation 2 and hotspot 1."""
    pods = s.workloads_by_owner

    def held(job: str) -> int:
        return len(pods.get(job, ()))

    co = {j: runnable(s, j, int(n)) for j, (n, _) in colocation.items()}
    owed = {"hotspot": {j: int(n) - max(co.get(j, 0), held(j)) for j, n in hotspot.items()},
            "colocation": {j: n - held(j) for j, n in co.items()}}
    return {cause: {j: n for j, n in jobs.items() if n > 0} for cause, jobs in owed.items()}

