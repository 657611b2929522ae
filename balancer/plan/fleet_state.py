"""A `ClusterSnapshot` as the placement engine sees it: one vectorised pass shared by the metrics and the planners.

`snapshot_state(s)` gives the placement engine's `ClusterState` (free milli-GPUs per GPU slot, free CPU and memory
per node), the observed workload mix (`WorkloadMix`: every workload, placed or pending, grouped by GPU shape) and
the per-workload columns it came from. `balancer.fleet_usage` turns it into the fragmentation metrics
(`gputide_fragmentation_ratio`, `gputide_unallocatable_gpus`); `balancer.plan.consolidation` plans the loop's
consolidation migrations on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from operator import attrgetter

import numpy as np

from balancer.model import ClusterSnapshot
from balancer.plan.columns import workload_columns
from balancer.plan.defrag import fragmentation_by_model
from balancer.plan.placement.fragmentation import WorkloadMix
from balancer.plan.placement.state import MILLI, NO_GPU, ClusterState


def column(items, attr: str) -> np.ndarray:
    """One integer attribute of every item, as an array."""
    return np.fromiter(map(attrgetter(attr), items), dtype=np.int64, count=len(items))


@dataclass(frozen=True, eq=False)
class _Topology:
    """Per-fleet arrays that only change when the fleet does (cached on the identity of the snapshot's tuples)."""

    nodes: tuple
    gpus: tuple
    slots: np.ndarray
    models: tuple[str, ...]
    gpu_model: np.ndarray    # per GPU: its model's position in `models`
    node_model: np.ndarray
    cpu_total: np.ndarray
    mem_total: np.ndarray


_topology_cache: list[_Topology] = []


def _topology(s: ClusterSnapshot) -> _Topology:
    if _topology_cache and _topology_cache[0].nodes is s.nodes and _topology_cache[0].gpus is s.gpus:
        return _topology_cache[0]
    models = tuple(sorted({g.model for g in s.gpus}))
    code = {m: i for i, m in enumerate(models)}
    gpu_model = np.fromiter((code[g.model] for g in s.gpus), dtype=np.int32, count=s.n_gpus)
    node_model = np.full(len(s.nodes), -1, dtype=np.int32)
    node_model[s.node_index] = gpu_model
    topo = _Topology(s.nodes, s.gpus, column(s.gpus, "slot"), models, gpu_model, node_model,
                     column(s.nodes, "cpu_milli"), column(s.nodes, "memory_mib"))
    _topology_cache[:] = [topo]
    return topo


def gpu_slots(s: ClusterSnapshot) -> np.ndarray:
    """Per GPU: its slot on its node (kept while the fleet's GPUs are the same tuple; do not write to it)."""
    return _topology(s).slots


def gpu_model_codes(s: ClusterSnapshot) -> np.ndarray:
    """Per GPU: its model's position in `snapshot_state(s).state.models` (kept as `gpu_slots`)."""
    return _topology(s).gpu_model


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


@dataclass(frozen=True, eq=False)
class SnapshotState:
    state: ClusterState       # nodes in snapshot order, GPU slots as the GPUs' `slot`
    mix: WorkloadMix
    cols: _Columns            # per workload, in snapshot order
    placed: np.ndarray        # per workload: has GPUs placed
    node_of: np.ndarray       # per workload: its node's position (0 where not placed)

    @cached_property
    def fragmentation(self) -> dict[str, dict[str, float]]:
        """`defrag.fragmentation_by_model` of this view: the metrics' and the consolidation's, computed once."""
        return fragmentation_by_model(self.state, self.mix)


_view_cache: list[tuple[ClusterSnapshot, SnapshotState]] = []


def snapshot_state(s: ClusterSnapshot) -> SnapshotState:
    """The placement engine's view of `s` (see the module docstring). The last snapshot's view is kept (a snapshot
    is immutable): the planner's consolidation and the fleet metrics of one cycle read the same snapshot."""
    if _view_cache and _view_cache[0][0] is s:
        return _view_cache[0][1]
    view = _snapshot_state(s)
    _view_cache[:] = [(s, view)]
    return view


def _snapshot_state(s: ClusterSnapshot) -> SnapshotState:
    n, ws = s.n_gpus, s.workloads
    cols = _Columns.of(s)
    counts, idx = cols.counts, cols.idx
    per_gpu = np.repeat(np.arange(len(ws)), counts)          # workload of each (workload, GPU) pair
    used = np.bincount(idx, weights=cols.milli[per_gpu], minlength=n)
    placed = counts > 0
    node_of = np.zeros(len(ws), dtype=np.int64)
    node_of[placed] = s.node_index[idx[(np.cumsum(counts) - counts)[placed]]]
    state = _cluster_state(s, used, np.where(placed, cols.cpu, 0), np.where(placed, cols.mem, 0), node_of)
    return SnapshotState(state, _mix(cols), cols, placed, node_of)
