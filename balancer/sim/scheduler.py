"""The simulator's built-in scheduler: a vectorised first-fit, and the view every scheduler receives.

A scheduler is any callable ``fn(view: SchedulerView, pending: list[Workload]) -> list[(name, gpu_indices)]``.
It must not mutate the view; the cluster checks every returned placement again (capacity, memory, model, taint,
health) and silently skips the ones that no longer fit, so a scheduler may be optimistic. Later issues plug the
placement engine's policies (balancer.plan.placement) in through `SimCluster.set_scheduler` from a higher layer.

`first_fit` places pending pods in priority order (highest first, then submission order). For each pod it builds
the feasibility mask over all GPUs in one numpy expression (online, healthy, node untainted, model allowed, free
milli-GPU and free memory), then picks the first node with at least ``gpus`` feasible GPUs (a multi-GPU pod
lives on one node, as in Kubernetes) and takes its first feasible GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from balancer.fleet import Fleet
from balancer.model import Workload


@dataclass(frozen=True, slots=True, eq=False)
class SchedulerView:
    """Read-only arrays a scheduler decides on (per GPU, fleet order, unless named per node)."""

    fleet: Fleet
    time: float
    gpu_model: np.ndarray        # catalogue keys (object array)
    node_index: np.ndarray
    schedulable: np.ndarray      # online, healthy and on an untainted node
    free_milli: np.ndarray
    free_mem_mib: np.ndarray
    temperature_c: np.ndarray

    def feasible(self, w: Workload, free_milli: np.ndarray | None = None,
                 free_mem: np.ndarray | None = None) -> np.ndarray:
        """Mask of GPUs that could host one GPU's share of `w`."""
        fm = self.free_milli if free_milli is None else free_milli
        fmem = self.free_mem_mib if free_mem is None else free_mem
        mask = self.schedulable & (fm >= w.gpu_milli) & (fmem >= w.gpu_memory_mib)
        if w.allowed_models is not None:
            mask &= np.isin(self.gpu_model, list(w.allowed_models))
        return mask


def pick_on_one_node(view: SchedulerView, mask: np.ndarray, k: int) -> tuple[int, ...] | None:
    """The first `k` feasible GPUs of the first node that has `k` of them, or None."""
    if k <= 0:
        return ()
    per_node = np.bincount(view.node_index[mask], minlength=len(view.fleet.nodes))
    nodes = np.flatnonzero(per_node >= k)
    if nodes.size == 0:
        return None
    idx = np.flatnonzero(mask & (view.node_index == nodes[0]))[:k]
    return tuple(int(i) for i in idx)


def first_fit(view: SchedulerView, pending: list[Workload]) -> list[tuple[str, tuple[int, ...]]]:
    free_milli = view.free_milli.copy()
    free_mem = view.free_mem_mib.copy()
    out: list[tuple[str, tuple[int, ...]]] = []
    order = sorted(range(len(pending)), key=lambda i: (-pending[i].priority, i))
    for i in order:
        w = pending[i]
        picked = pick_on_one_node(view, view.feasible(w, free_milli, free_mem), w.gpus)
        if picked is None:
            continue
        sel = np.asarray(picked, dtype=np.int64)
        free_milli[sel] -= w.gpu_milli
        free_mem[sel] -= w.gpu_memory_mib
        out.append((w.name, picked))
    return out
