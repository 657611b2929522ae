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
refreshes one node at a time after each placement, so scoring a pod costs one pass over its candidates. That
pass is the replay's hot loop: how a shared-GPU pod changes a slot's statistics depends only on the slot's free
milli, so it is read from a per-request table; nodes in the same state (`NodeClasses`: most candidates are
untouched nodes of a few hardware types) share their row of the [candidates, types] matrix, so each distinct
row is computed once and then copied into place. The matrix itself and its product with the weights stay
exactly as they were: BLAS sums a row differently depending on the matrix it sits in, and a last-bit change
could flip a tie between nodes.

`include_cpu_only` decides what a CPU-only type means. FGD counts its idle GPUs as fragments whether or not it
fits, a constant that cannot change a decision, so `fgd` leaves such types out. gputide keeps them and counts
the node's idle GPUs as fragmented only when the node has no CPU/memory left for them (GPUs stranded by CPU).
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from balancer.plan.placement.nodestats import NodeClasses
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
        return cls.from_groups({key: len(m) for key, m in groups.items()}, lambda key: _medians(groups[key], memory),
                               coverage)

    @classmethod
    def from_groups(
        cls, sizes: Mapping[tuple, int], medians: Callable[[tuple], tuple[int, int]], coverage: float = 1.0
    ):
        """The mix of pod types `sizes` (type key -> pods of it, in order of first appearance) with median CPU and
        memory `medians(key)`: the most popular types up to `coverage`, ties by first appearance."""
        if not sizes:
            return cls(*(np.zeros(0, dtype=np.int64) for _ in range(4)), np.zeros(0), ())
        counts = Counter(sizes)
        total = sum(counts.values())
        kept, covered = [], 0
        for key, count in counts.most_common():
            if covered >= coverage * total:
                break
            kept.append(key)
            covered += count
        weight = np.array([sizes[key] for key in kept], dtype=float)
        cpu_mem = [medians(key) for key in kept]
        return cls(
            cpu=np.array([cpu for cpu, _ in cpu_mem], dtype=np.int64),
            mem=np.array([mem for _, mem in cpu_mem], dtype=np.int64),
            num_gpu=np.array([k[0] for k in kept], dtype=np.int64),
            milli=np.array([k[1] for k in kept], dtype=np.int64),
            weight=weight / weight.sum(),
            allowed=tuple(k[2] for k in kept),
        )

    def __len__(self) -> int:
        return len(self.weight)

    @cached_property
    def cpu_per_gpu(self) -> float:
        """CPU milli the mix asks per GPU it uses (0 when it uses none): a constant the scores read per pod."""
        gpus = (self.weight * self.num_gpu * np.maximum(self.milli, 1) / MILLI).sum()
        return float((self.weight * self.cpu).sum() / gpus) if gpus > 0 else 0.0

    def model_ok(self, state: ClusterState) -> np.ndarray:
        """[n, t] True where a node's GPU model is allowed for the type (CPU-only types: every node, whatever their
        gpu_spec says, as the GpuModelFit filter places them)."""
        table = np.ones((len(self), len(state.models) + 1), dtype=bool)
        for t, allowed in enumerate(self.allowed):
            if self.num_gpu[t]:
                table[t, :-1] = resolve_models(allowed, state.models)[0]
        table[:, -1] = self.num_gpu == 0  # model index -1 (no GPU) only suits CPU-only types
        return table[:, state.model].T


def _medians(pods: Iterable[PodRequest], memory: bool) -> tuple[int, int]:
    pods = list(pods)
    return int(np.median([p.cpu_milli for p in pods])), int(np.median([p.memory_mib for p in pods])) if memory else 0


class MixWindow:
    """The workload mix of the last `size` pods, kept up to date one pod at a time.

    `mix()` is `WorkloadMix.from_pods(the last size pods, **options)`: the same types in the same order with the
    same weights and medians. A caller that asks for the mix after every pod (the secondary scheduler) would
    otherwise regroup the whole window each time; here a pod joins its type, the pod it pushes out leaves its
    type, and only those two types' medians are taken again. A type's place in the order is its oldest pod's."""

    def __init__(self, size: int, *, include_cpu_only: bool = True, coverage: float = 1.0, key_cpu: bool = False,
                 memory: bool = True) -> None:
        self.window: deque[tuple | None] = deque(maxlen=size)  # each pod's type key (None: not in the mix)
        self.include_cpu_only, self.coverage, self.key_cpu, self.memory = include_cpu_only, coverage, key_cpu, memory
        self._types: dict[tuple, deque[tuple[int, PodRequest]]] = {}
        self._medians: dict[tuple, tuple[int, int]] = {}
        self._arrivals = 0
        self._mix: WorkloadMix | None = None

    def append(self, pod: PodRequest) -> None:
        if self.window.maxlen == 0:
            return
        if len(self.window) == self.window.maxlen:
            old = self.window[0]
            if old is not None:
                members = self._types[old]
                members.popleft()
                if not members:
                    del self._types[old]
                self._forget(old)
        key = None
        if pod.num_gpu or self.include_cpu_only:
            key = (pod.num_gpu, pod.gpu_milli, pod.allowed_models) + ((pod.cpu_milli,) if self.key_cpu else ())
            self._types.setdefault(key, deque()).append((self._arrivals, pod))
            self._forget(key)
        self.window.append(key)
        self._arrivals += 1

    def _forget(self, key: tuple) -> None:
        self._medians.pop(key, None)
        self._mix = None

    def mix(self) -> WorkloadMix:
        if self._mix is None:
            order = sorted(self._types, key=lambda key: self._types[key][0][0])
            self._mix = WorkloadMix.from_groups({key: len(self._types[key]) for key in order}, self._median,
                                                self.coverage)
        return self._mix

    def _median(self, key: tuple) -> tuple[int, int]:
        if key not in self._medians:
            self._medians[key] = _medians((pod for _, pod in self._types[key]), self.memory)
        return self._medians[key]


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
        self.gpu_only = bool(np.all(mix.num_gpu > 0))  # no CPU-only type: a fitting type leaves `below`
        self._slot_tables: dict[int, tuple[np.ndarray, np.ndarray]] = {}
        # per free milli v = -1..MILLI (row v + 1): does a slot with v free fit the type, its idle milli if not
        v = np.arange(-1, MILLI + 1, dtype=np.int64)[:, None]
        self._slot_fits = (v >= self.need).astype(np.int64)
        self._slot_below = np.maximum(v, 0) * (v < self.need)
        self.rebuild()

    def rebuild(self) -> None:
        """Every node from the state. The statistics are computed once per `NodeClasses` class (a fleet of
        thousands of nodes has tens of distinct states) and copied to its nodes: they are integers, so the copies
        are what each node would compute; `expected` is still the product of the whole matrix."""
        s = self.state
        self.classes = NodeClasses(s)
        _, first, inverse = np.unique(self.classes.id, return_index=True, return_inverse=True)
        free = s.gpu_free[first]
        fits_slot = free[:, :, None] >= self.need[None, None, :]
        idle = np.where(free > 0, free, 0)
        count = fits_slot.sum(axis=1)
        below = (idle[:, :, None] * ~fits_slot).sum(axis=1)
        total = idle.sum(axis=1)
        frag = _frag(
            count, below, total[:, None], s.cpu_free[first, None], s.mem_free[first, None], self.model_ok[first],
            self.mix,
        )  # fmt: skip
        inverse = inverse.reshape(-1)
        self.count, self.below, self.total, self.frag = count[inverse], below[inverse], total[inverse], frag[inverse]
        self.expected = self.frag @ self.mix.weight

    def refresh(self, node: int) -> None:
        s = self.state
        free = s.gpu_free[node]
        rows = free + 1  # per-slot rows of the tables below (free milli -1..MILLI)
        self.count[node] = self._slot_fits[rows].sum(axis=0)
        self.below[node] = self._slot_below[rows].sum(axis=0)
        self.total[node] = free[free > 0].sum()
        self.frag[node] = _frag(
            self.count[node], self.below[node], self.total[node], s.cpu_free[node], s.mem_free[node],
            self.model_ok[node], self.mix,
        )  # fmt: skip
        self.expected[node] = self.frag[node] @ self.mix.weight
        self.classes.refresh(node)

    def delta(self, nodes: np.ndarray, values: np.ndarray, pod: PodRequest) -> np.ndarray:
        """Increase of expected fragmentation if `pod` goes on `nodes` (taking slots whose free milli is `values`)."""
        first, group = self.classes.groups(nodes, values)
        after = self._after(nodes[first], values[first], pod)[group]
        return after @ self.mix.weight - self.expected[nodes]

    def _after(self, nodes: np.ndarray, values: np.ndarray, pod: PodRequest) -> np.ndarray:
        """[c, t] fragmented milli per type once `pod` is on `nodes` (the `_frag` of the updated statistics)."""
        mix = self.mix
        count, below, total = self.count[nodes], self.below[nodes], self.total[nodes]
        if pod.num_gpu == 1:
            dcount, dbelow = self._slot_change(pod.gpu_milli)
            count += dcount[values]
            below += dbelow[values]
            total -= pod.gpu_milli
        elif pod.num_gpu > 1:
            count -= pod.num_gpu
            total -= pod.num_gpu * MILLI
        # _frag, unrolled in place (same integers, fewer temporaries)
        fits = self.model_ok[nodes]
        fits &= (self.state.cpu_free[nodes] - pod.cpu_milli)[:, None] >= mix.cpu
        fits &= (self.state.mem_free[nodes] - pod.memory_mib)[:, None] >= mix.mem
        fits &= count >= mix.num_gpu
        if not self.gpu_only:
            below = np.where(mix.num_gpu > 0, below, 0)
        return np.where(fits, below, total[:, None])

    def _slot_change(self, milli: int) -> tuple[np.ndarray, np.ndarray]:
        """[MILLI + 1, t] change of `count` and `below` when a slot with v free milli gives `milli` (row v)."""
        tables = self._slot_tables.get(milli)
        if tables is None:
            v = np.arange(MILLI + 1, dtype=np.int64)[:, None]
            nv = v - milli
            need = self.need[None, :]
            dcount = (nv >= need).astype(np.int64) - (v >= need)
            dbelow = nv * (nv < need) - v * (v < need)
            tables = self._slot_tables[milli] = (dcount, dbelow)
        return tables
