"""Array-based cluster state and pod requests: the placement engine's only inputs.

A `ClusterState` is a handful of numpy arrays over nodes (shape [n_nodes]) and GPU slots
(shape [n_nodes, max_gpus]), independent of any object model, so the FGD replay, the simulator's
scheduler, the reconcile loop and a Kubernetes secondary scheduler can all build one cheaply.

GPU capacity is counted in milli-GPUs (0..1000 per GPU, as in Alibaba's v2023 trace where a pod may ask for
`gpu_milli=470` of one GPU). A slot that holds no GPU has free milli -1, so `free >= m` is never true for it.
`model[n]` indexes `models` (a tuple of names); -1 means a node without GPUs. Taints and tolerations are
bitmasks: a node is usable when every taint bit it carries is tolerated.

A `PodRequest` names its allowed GPU models (the trace's `gpu_spec`, e.g. `V100M16|V100M32`; empty = any), and
may name nodes it must not go to (`excluded_nodes`: a move the actuator refused there lately).
Names that match no model of the cluster never fit anywhere; `resolve_models` reports them so callers can say so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

MILLI = 1000
NO_GPU = -1


def parse_gpu_spec(spec: object) -> tuple[str, ...] | None:
    """`"V100M16|V100M32"` -> ("V100M16", "V100M32"); empty, NaN or None -> None (any model)."""
    if spec is None:
        return None
    if isinstance(spec, float) and np.isnan(spec):
        return None
    names = tuple(sorted({part.strip() for part in str(spec).split("|") if part.strip()}))
    return names or None


@dataclass(frozen=True)
class PodRequest:
    """What one pod asks for. `gpu_milli` is per GPU; whole GPUs (1000) when num_gpu > 1."""

    cpu_milli: int
    memory_mib: int
    num_gpu: int = 0
    gpu_milli: int = 0
    allowed_models: tuple[str, ...] | None = None
    tolerations: int = 0
    name: str = ""
    # node positions the pod may not go to (the reconcile loop's refused targets: the actuator refused moving this
    # workload there lately, for a reason the planner does not model); a filter input, `Scheduler.feasible_nodes`
    excluded_nodes: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.num_gpu < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ValueError(f"negative request in {self!r}")
        if self.num_gpu == 0 and self.gpu_milli:
            object.__setattr__(self, "gpu_milli", 0)
        if self.num_gpu >= 1 and not 0 < self.gpu_milli <= MILLI:
            raise ValueError(f"gpu_milli must be 1..{MILLI} when num_gpu >= 1, got {self.gpu_milli}")
        if self.num_gpu > 1 and self.gpu_milli != MILLI:
            object.__setattr__(self, "gpu_milli", MILLI)

    @property
    def total_gpu_milli(self) -> int:
        return self.num_gpu * self.gpu_milli


def resolve_models(
    allowed: tuple[str, ...] | None, models: tuple[str, ...]
) -> tuple[np.ndarray, tuple[str, ...]]:
    """Boolean mask over `models` for an allowed-model list, and the names that match no model."""
    if allowed is None:
        return np.ones(len(models), dtype=bool), ()
    index = {name: i for i, name in enumerate(models)}
    mask = np.zeros(len(models), dtype=bool)
    unknown = []
    for name in allowed:
        if name in index:
            mask[index[name]] = True
        else:
            unknown.append(name)
    return mask, tuple(unknown)


@dataclass
class ClusterState:
    """Free and total resources over nodes and GPU slots. Mutated by `assign` / `release` only."""

    cpu_total: np.ndarray
    mem_total: np.ndarray
    gpu_free: np.ndarray  # [n, g] int32 milli, -1 where no GPU
    model: np.ndarray  # [n] int, index into models, -1 = no GPU
    models: tuple[str, ...]
    cpu_free: np.ndarray = field(default=None)  # type: ignore[assignment]
    mem_free: np.ndarray = field(default=None)  # type: ignore[assignment]
    nvlink_domain: np.ndarray = field(default=None)  # type: ignore[assignment]  # [n, g] int
    temp_headroom: np.ndarray = field(default=None)  # type: ignore[assignment]  # [n, g] float, NaN unknown
    taints: np.ndarray = field(default=None)  # type: ignore[assignment]  # [n] int64 bitmask
    names: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        self.cpu_total = np.asarray(self.cpu_total, dtype=np.int64)
        self.mem_total = np.asarray(self.mem_total, dtype=np.int64)
        self.gpu_free = np.asarray(self.gpu_free, dtype=np.int32).reshape(len(self.cpu_total), -1)
        self.model = np.asarray(self.model, dtype=np.int32)
        n, g = self.gpu_free.shape
        self.cpu_free = (
            self.cpu_total.copy() if self.cpu_free is None else np.asarray(self.cpu_free, np.int64)
        )
        self.mem_free = (
            self.mem_total.copy() if self.mem_free is None else np.asarray(self.mem_free, np.int64)
        )
        if self.nvlink_domain is None:
            self.nvlink_domain = np.zeros((n, g), dtype=np.int32)
        if self.temp_headroom is None:
            self.temp_headroom = np.full((n, g), np.nan)
        if self.taints is None:
            self.taints = np.zeros(n, dtype=np.int64)
        self.gpu_exists = self.gpu_free >= 0
        self.gpu_count = self.gpu_exists.sum(axis=1)
        if np.any(self.model[self.gpu_count > 0] < 0):
            raise ValueError("a node with GPUs needs a model index")

    @classmethod
    def from_nodes(
        cls,
        cpu_milli: np.ndarray,
        memory_mib: np.ndarray,
        gpus: np.ndarray,
        model_names: list[str | None],
        names: tuple[str, ...] = (),
    ) -> ClusterState:
        """Empty cluster from per-node capacities; `model_names[i]` None or '' for GPU-less nodes."""
        gpus = np.asarray(gpus, dtype=np.int32)
        width = max(int(gpus.max(initial=0)), 1)
        free = np.where(np.arange(width)[None, :] < gpus[:, None], MILLI, NO_GPU).astype(np.int32)
        models = tuple(sorted({m for m, k in zip(model_names, gpus, strict=True) if m and k > 0}))
        index = {m: i for i, m in enumerate(models)}
        model = np.array([index.get(m, -1) if k > 0 else -1 for m, k in zip(model_names, gpus, strict=True)])
        return cls(cpu_milli, memory_mib, free, model, models, names=names)

    @property
    def n_nodes(self) -> int:
        return len(self.cpu_total)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpu_count.sum()) * MILLI

    def allocated_gpu_milli(self) -> int:
        return self.total_gpu_milli - int(self.gpu_free[self.gpu_exists].sum())

    def copy(self) -> ClusterState:
        return ClusterState(
            self.cpu_total, self.mem_total, self.gpu_free.copy(), self.model, self.models,
            cpu_free=self.cpu_free.copy(), mem_free=self.mem_free.copy(), nvlink_domain=self.nvlink_domain,
            temp_headroom=self.temp_headroom.copy(), taints=self.taints.copy(), names=self.names,
        )  # fmt: skip

    def assign(self, node: int, slots: tuple[int, ...], milli: int, cpu: int, mem: int) -> None:
        """Take `milli` from each slot plus cpu/mem on `node`; refuses to over-commit."""
        idx = list(slots)
        if (
            self.cpu_free[node] < cpu
            or self.mem_free[node] < mem
            or (idx and np.any(self.gpu_free[node, idx] < milli))
            or len(set(idx)) != len(idx)
        ):
            raise ValueError(
                f"assign over-commits node {node}: slots={slots} milli={milli} cpu={cpu} mem={mem}"
            )
        self.cpu_free[node] -= cpu
        self.mem_free[node] -= mem
        if idx:
            self.gpu_free[node, idx] -= milli

    def release(self, node: int, slots: tuple[int, ...], milli: int, cpu: int, mem: int) -> None:
        """Give back what `assign` took; refuses to exceed capacity."""
        idx = list(slots)
        if (
            self.cpu_free[node] + cpu > self.cpu_total[node]
            or self.mem_free[node] + mem > self.mem_total[node]
            or (idx and np.any(self.gpu_free[node, idx] + milli > MILLI))
            or (idx and not np.all(self.gpu_exists[node, idx]))
        ):
            raise ValueError(f"release exceeds capacity on node {node}")
        self.cpu_free[node] += cpu
        self.mem_free[node] += mem
        if idx:
            self.gpu_free[node, idx] += milli


@dataclass(frozen=True)
class Placement:
    """Where a pod went: node index, GPU slots and milli taken from each slot."""

    node: int
    slots: tuple[int, ...]
    milli: int
    cpu_milli: int
    memory_mib: int

    def apply(self, state: ClusterState) -> None:
        state.assign(self.node, self.slots, self.milli, self.cpu_milli, self.memory_mib)

    def undo(self, state: ClusterState) -> None:
        state.release(self.node, self.slots, self.milli, self.cpu_milli, self.memory_mib)
