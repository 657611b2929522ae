"""FGD's fragmentation measure, vectorised over nodes and workload types.

Weng et al. (USENIX ATC'23, "Beware of Fragmentation") define the fragmentation of a node *for a task type*
as the idle GPU capacity that task cannot use there: all of the node's idle GPU milli when the task cannot be
placed on it at all (too little CPU or memory, wrong GPU model, not enough GPUs with room), otherwise the idle
milli of the GPUs whose free share is below the task's per-GPU request. The node's *expected* fragmentation is
the popularity-weighted sum over the observed workload mix; FGD places each task where that sum grows least
(fragmentation gradient descent).

`WorkloadMix` is the target distribution: pod types keyed by (num_gpu, gpu_milli, allowed models), with their
median CPU/memory and popularity. `FragCache` keeps per node and type the statistics the measure needs
(count of GPUs that could take the type, idle milli below its request, the resulting fragmentation) and
refreshes one node at a time after each placement, so scoring a pod costs one pass over its candidates.

`include_cpu_only` decides what a CPU-only type means. FGD counts its idle GPUs as fragments whether or not it
fits, a constant that cannot change a decision, so `fgd` leaves such types out. gputide keeps them and counts
the node's idle GPUs as fragmented only when the node has no CPU/memory left for them (GPUs stranded by CPU).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

import numpy as np

from balancer.plan.placement.state import MILLI, ClusterState, PodRequest, resolve_models


@dataclass(frozen=True)
class WorkloadMix:
    """Typical pod types and their popularity (weights sum to 1)."""

    cpu: np.ndarray  # [t]
    mem: np.ndarray  # [t]
    num_gpu: np.ndarray  # [t]
    milli: np.ndarray  # [t] per GPU; 0 for CPU-only types
    weight: np.ndarray  # [t]
    allowed: tuple[tuple[str, ...] | None, ...]

    @classmethod
    def from_pods(
        cls,
        pods: Iterable[PodRequest],
        *,
        include_cpu_only: bool = True,
        coverage: float = 1.0,
        key_cpu: bool = False,
        memory: bool = True,
    ):
        """Group pods by GPU shape and model constraint; keep the most popular types up to `coverage`.

        `key_cpu` adds the CPU request to the key, as the FGD authors' simulator does (their `PodResource` is
        CPU, GPU milli, GPU count and GPU type); `memory=False` leaves memory out of the measure, as they do.
        """
        groups: dict[tuple, list[PodRequest]] = {}
        for pod in pods:
            if pod.num_gpu == 0 and not include_cpu_only:
                continue
            key = (pod.num_gpu, pod.gpu_milli, pod.allowed_models) + ((pod.cpu_milli,) if key_cpu else ())
            groups.setdefault(key, []).append(pod)
        if not groups:
            return cls(*(np.zeros(0, dtype=np.int64) for _ in range(4)), np.zeros(0), ())
        counts = Counter({key: len(members) for key, members in groups.items()})
        total = sum(counts.values())
        kept, covered = [], 0
        for key, count in counts.most_common():
            if covered >= coverage * total:
                break
            kept.append(key)
            covered += count
        members = [groups[key] for key in kept]
        weight = np.array([len(m) for m in members], dtype=float)
        return cls(
            cpu=np.array([int(np.median([p.cpu_milli for p in m])) for m in members], dtype=np.int64),
            mem=np.array(
                [int(np.median([p.memory_mib for p in m])) if memory else 0 for m in members], dtype=np.int64
            ),
            num_gpu=np.array([k[0] for k in kept], dtype=np.int64),
            milli=np.array([k[1] for k in kept], dtype=np.int64),
            weight=weight / weight.sum(),
            allowed=tuple(k[2] for k in kept),
        )

    def __len__(self) -> int:
        return len(self.weight)

    def model_ok(self, state: ClusterState) -> np.ndarray:
        """[n, t] True where a node's GPU model is allowed for the type (CPU-only types: every node)."""
        table = np.ones((len(self), len(state.models) + 1), dtype=bool)
        for t, allowed in enumerate(self.allowed):
            table[t, :-1] = resolve_models(allowed, state.models)[0]
        table[:, -1] = self.num_gpu == 0  # model index -1 (no GPU) only suits CPU-only types
        return table[:, state.model].T


def node_fragmentation(
    free: np.ndarray, cpu_free: np.ndarray, mem_free: np.ndarray, model_ok: np.ndarray, mix: WorkloadMix
) -> np.ndarray:
    """[n, t] fragmented idle milli per node and type, for gpu_free rows `free` ([n, g], -1 = no GPU)."""
    idle = np.where(free > 0, free, 0)
    fits_slot = free[:, :, None] >= np.maximum(mix.milli, 1)[None, None, :]
    count = fits_slot.sum(axis=1)
    below = (idle[:, :, None] * ~fits_slot).sum(axis=1)
    total = idle.sum(axis=1)[:, None]
    return _frag(count, below, total, cpu_free[:, None], mem_free[:, None], model_ok, mix)


def _frag(count, below, total, cpu_free, mem_free, model_ok, mix: WorkloadMix) -> np.ndarray:
    fits = model_ok & (cpu_free >= mix.cpu) & (mem_free >= mix.mem) & (count >= mix.num_gpu)
    return np.where(fits, np.where(mix.num_gpu > 0, below, 0), total)


class FragCache:
    """Per-node, per-type fragmentation statistics of a ClusterState, refreshed one node at a time."""

    def __init__(self, state: ClusterState, mix: WorkloadMix) -> None:
        self.state = state
        self.mix = mix
        self.model_ok = mix.model_ok(state)
        self.need = np.maximum(mix.milli, 1)
        self.rebuild()

    def rebuild(self) -> None:
        s = self.state
        free = s.gpu_free
        fits_slot = free[:, :, None] >= self.need[None, None, :]
        idle = np.where(free > 0, free, 0)
        self.count = fits_slot.sum(axis=1)
        self.below = (idle[:, :, None] * ~fits_slot).sum(axis=1)
        self.total = idle.sum(axis=1)
        self.frag = _frag(
            self.count, self.below, self.total[:, None], s.cpu_free[:, None], s.mem_free[:, None], self.model_ok,
            self.mix,
        )  # fmt: skip
        self.expected = self.frag @ self.mix.weight

    def refresh(self, node: int) -> None:
        s = self.state
        free = s.gpu_free[node]
        fits_slot = free[:, None] >= self.need[None, :]
        idle = np.where(free > 0, free, 0)
        self.count[node] = fits_slot.sum(axis=0)
        self.below[node] = (idle[:, None] * ~fits_slot).sum(axis=0)
        self.total[node] = idle.sum()
        self.frag[node] = _frag(
            self.count[node], self.below[node], self.total[node], s.cpu_free[node], s.mem_free[node],
            self.model_ok[node], self.mix,
        )  # fmt: skip
        self.expected[node] = self.frag[node] @ self.mix.weight

    def delta(self, nodes: np.ndarray, values: np.ndarray, pod: PodRequest) -> np.ndarray:
        """Increase of expected fragmentation if `pod` goes on `nodes` (taking slots whose free milli is `values`)."""
        mix = self.mix
        count, below, total = self.count[nodes], self.below[nodes], self.total[nodes]
        if pod.num_gpu == 1:
            v = values[:, None]
            nv = v - pod.gpu_milli
            need = self.need[None, :]
            count = count - (v >= need) + (nv >= need)
            below = below - v * (v < need) + nv * (nv < need)
            total = total - pod.gpu_milli
        elif pod.num_gpu > 1:
            count = count - pod.num_gpu
            total = total - pod.num_gpu * MILLI
        cpu = self.state.cpu_free[nodes] - pod.cpu_milli
        mem = self.state.mem_free[nodes] - pod.memory_mib
        after = _frag(count, below, total[:, None], cpu[:, None], mem[:, None], self.model_ok[nodes], mix)
        return after @ mix.weight - self.expected[nodes]
