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
* `gputide_shrunk_workers{cause}` (`owed_workers`, summed over jobs): the workers gputide took from training jobs and still owes
  back, by the planner that took them (`hotspot`, `colocation`), from the shrinks the planner state holds owed;
  `owed_workers` says which jobs owe them (the loop times each job's debt for `gputide_shrunk_longest_seconds`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from itertools import repeat
from operator import attrgetter

import numpy as np

from balancer.model import ClusterSnapshot, WorkloadClass
from balancer.plan.columns import workload_columns
from balancer.plan.defrag import fragmentation_by_model
from balancer.plan.placement.fragmentation import WorkloadMix
from balancer.plan.placement.state import MILLI, NO_GPU, ClusterState
from balancer.plan.shrink_records import runnable


@dataclass(frozen=True)
class FleetUsage:
    capacity: dict[str, int]                                  # inference, training, idle (loaned is not seen here)
    fragmentation: dict[str, dict[str, float]]                # model -> fragmentation_ratio, unallocatable_gpus, ...
    waiting_jobs: frozenset[str] = field(default_factory=frozenset)


def _column(items, attr: str) -> np.ndarray:
    """One integer attribute of every item, as an array."""
    return np.fromiter(map(attrgetter(attr), items), dtype=np.int64, count=len(items))


@dataclass(frozen=True, eq=False)
class _Topology:
    """Per-fleet arrays that only change when the fleet does (cached on the identity of the snapshot's tuples)."""

    nodes: tuple
    gpus: tuple
    slots: np.ndarray
    models: tuple[str, ...]
    node_model: np.ndarray
    cpu_total: np.ndarray
    mem_total: np.ndarray


_topology_cache: list[_Topology] = []


def _topology(s: ClusterSnapshot) -> _Topology:
    if _topology_cache and _topology_cache[0].nodes is s.nodes and _topology_cache[0].gpus is s.gpus:
        return _topology_cache[0]
    models = tuple(sorted({g.model for g in s.gpus}))
    code = {m: i for i, m in enumerate(models)}
    node_model = np.full(len(s.nodes), -1, dtype=np.int32)
    node_model[s.node_index] = np.fromiter((code[g.model] for g in s.gpus), dtype=np.int32, count=s.n_gpus)
    topo = _Topology(s.nodes, s.gpus, _column(s.gpus, "slot"), models, node_model,
                     _column(s.nodes, "cpu_milli"), _column(s.nodes, "memory_mib"))
    _topology_cache[:] = [topo]
    return topo


def fleet_usage(s: ClusterSnapshot) -> FleetUsage:
    """Capacity by class, fragmentation per GPU model and waiting training jobs (see the module docstring)."""
    n, ws = s.n_gpus, s.workloads
    cols = _Columns.of(s)
    counts, idx = cols.counts, cols.idx
    per_gpu = np.repeat(np.arange(len(ws)), counts)          # workload of each (workload, GPU) pair
    has_inf = np.bincount(idx[cols.cls[per_gpu] == 0], minlength=n) > 0
    has_any = np.bincount(idx, minlength=n) > 0
    capacity = {"inference": int(has_inf.sum()), "training": int((has_any & ~has_inf).sum()),
                "idle": int((~has_any).sum())}
    used = np.bincount(idx, weights=cols.milli[per_gpu], minlength=n)
    placed = counts > 0
    node_of = np.zeros(len(ws), dtype=np.int64)
    node_of[placed] = s.node_index[idx[(np.cumsum(counts) - counts)[placed]]]
    state = _cluster_state(s, used, np.where(placed, cols.cpu, 0), np.where(placed, cols.mem, 0), node_of)
    frag = fragmentation_by_model(state, _mix(cols))
    return FleetUsage(capacity=capacity, fragmentation=frag, waiting_jobs=_waiting(ws, cols.cls == 1, placed))


@dataclass(frozen=True, eq=False)
class _Columns:
    """Per-workload numbers as arrays: the planner's per-snapshot `workload_columns`, under this module's names."""

    cls: np.ndarray        # 0 inference, 1 training, 2 batch
    gpus: np.ndarray
    milli: np.ndarray
    cpu: np.ndarray
    mem: np.ndarray
    allowed: tuple
    counts: np.ndarray     # GPUs placed per workload
    idx: np.ndarray        # GPU of each (workload, placed GPU) pair

    @classmethod
    def of(cls, s: ClusterSnapshot) -> _Columns:
        c = workload_columns(s)
        return cls(c.cls, c.gpus, c.gpu_milli, c.cpu_milli, c.memory_mib, c.allowed, c.counts, c.idx)


def _cluster_state(s: ClusterSnapshot, used_milli: np.ndarray, cpu: np.ndarray, mem: np.ndarray,
                   node_of: np.ndarray) -> ClusterState:
    """The placement engine's ClusterState (free milli per GPU slot, free CPU / memory per node) of a snapshot."""
    topo = _topology(s)
    n_nodes = len(s.nodes)
    width = max(int(topo.slots.max(initial=-1)) + 1, 1)
    free = np.full((n_nodes, width), NO_GPU, dtype=np.int32)
    free[s.node_index, topo.slots] = np.clip(MILLI - np.rint(used_milli), 0, MILLI).astype(np.int32)
    cpu_free = topo.cpu_total - np.bincount(node_of, weights=cpu, minlength=n_nodes).astype(np.int64)
    mem_free = topo.mem_total - np.bincount(node_of, weights=mem, minlength=n_nodes).astype(np.int64)
    return ClusterState(topo.cpu_total, topo.mem_total, free, topo.node_model, topo.models, cpu_free=cpu_free,
                        mem_free=mem_free)


def workload_mix(s: ClusterSnapshot) -> WorkloadMix:
    """The snapshot's workloads grouped by (GPUs, milli-GPU per GPU, allowed models), as `WorkloadMix.from_pods`
    groups pods, with the median CPU and memory per group; vectorised (no PodRequest per workload)."""
    return _mix(_Columns.of(s))


def _mix(c: _Columns) -> WorkloadMix:
    if not len(c.cls):
        return WorkloadMix.from_pods(())
    allowed_code: dict[frozenset | None, int] = {None: 0}
    for a in set(c.allowed):
        allowed_code.setdefault(a, len(allowed_code))
    k = len(allowed_code)
    milli = np.where(c.gpus == 0, 0, np.where(c.gpus > 1, MILLI, np.clip(c.milli, 1, MILLI)))  # PodRequest's rules
    allowed = np.fromiter(map(allowed_code.__getitem__, c.allowed), dtype=np.int64, count=len(c.allowed))
    uniq, inverse, count = np.unique((c.gpus * (MILLI + 1) + milli) * k + allowed, return_inverse=True,
                                     return_counts=True)
    start = np.cumsum(count) - count

    def median(values: np.ndarray) -> np.ndarray:
        v = values[np.lexsort((values, inverse))]
        return ((v[start + (count - 1) // 2] + v[start + count // 2]) // 2).astype(np.int64)

    names = {code: a for a, code in allowed_code.items()}
    return WorkloadMix(cpu=median(c.cpu), mem=median(c.mem), num_gpu=uniq // k // (MILLI + 1),
                       milli=uniq // k % (MILLI + 1), weight=count / count.sum(),
                       allowed=tuple(None if names[int(a)] is None else tuple(sorted(names[int(a)]))
                                     for a in uniq % k))


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
    np.maximum.at(need, job, _column(members, "elastic_min"))
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

