"""The domain model: immutable data that flows through the controller.

A `ClusterSnapshot` is what the controller knows at one instant. Its topology (nodes, GPUs) and workloads are
tuples of frozen dataclasses; its per-GPU telemetry is a set of read-only numpy arrays indexed by the GPU's
position in `gpus`, so planners work on whole fleets in one vectorised pass instead of looping over objects. The
dataclasses (`Node`, `Gpu`, `Workload`, `ServiceStatus`, ...) live in `balancer.inventory` and are re-exported here.

Decisions are data too: an `Action` is frozen, carries a `reason` and an `expected_gain`, prints and compares
well; a `Plan` is a tuple of actions plus the objective before and after, as simulated. They live in
`balancer.actions` and are re-exported here.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields
from functools import cached_property
from operator import attrgetter
from types import MappingProxyType

import numpy as np

from balancer.actions import (  # re-exported: decisions as data (balancer/actions.py)
    Action,
    Migrate,
    Plan,
    ScaleInference,
    ScaleTraining,
    SetPowerLimit,
    TaintNode,
)
from balancer.admission import Admission
from balancer.inventory import (  # re-exported: what a fleet is made of (balancer/inventory.py)
    DisruptionBudget,
    Gpu,
    Node,
    NodeGpuFacts,
    NodeMeta,
    ServiceStatus,
    SuspendedJob,
    Workload,
    WorkloadClass,
)
from balancer.noderules import NodeRules

__all__ = [
    "GPU_ARRAYS", "MAY_BE_UNKNOWN", "Action", "ClusterSnapshot", "DisruptionBudget", "Forecast", "Gpu", "Migrate",
    "Node", "NodeGpuFacts", "NodeMeta", "Plan", "ScaleInference", "ScaleTraining", "ServiceStatus", "SetPowerLimit",
    "SuspendedJob", "TaintNode", "Workload", "WorkloadClass", "placed",
]


GPU_ARRAYS = (
    "temperature_c", "memory_temperature_c", "slowdown_temp_c", "power_w", "power_limit_w", "sm_active",
    "mem_used_mib", "mem_total_mib", "sm_clock_mhz", "clock_event_reasons", "xid", "sample_age_s",
    "memory_unhealthy",
)
# Arrays that may hold NaN for "unknown": a board that never reports the field (the exporter declares it
# unsupported, e.g. SM activity of an A100/A30 in MIG mode) is not missing telemetry, and nothing may read its NaN
# as 0 (an idle GPU). Every other array is finite (`balancer.safety.check_telemetry`).
MAY_BE_UNKNOWN = frozenset({"sm_active"})
# XIDs after which a GPU gets no new work and is neither lent nor counted as capacity: those whose immediate action in
# NVIDIA's Xid catalogue (docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html) is a GPU reset, a node
# reboot or a VM restart, or an NVLink / double-bit-ECC workflow that ends in one: 46 (GPU stopped processing), 48
# (double-bit ECC), 62 (micro-controller halt), 64 (row remap failure), 74 and 144-150 (NVLink, NVLink5), 79 (fallen
# off the bus), 95 (uncontained ECC), 109 (context-switch timeout), 110 (security fault), 119/120 (GSP), 136 (link
# training), 140 (unrecovered ECC), 143 (GPU init), 151 (key rotation), 155 (NVLink SW-defined), 156 (resource
# retirement), 158 (fatal timeout), 160 (channel retirement); 154 (recovery action changed: the driver now wants a
# reset or a reboot; DCGM_FI_DEV_XID_ERRORS keeps only the last code, so the 154 that follows a 79 is all a scrape
# sees); and, more cautious than the catalogue, 63/92/94 (row remap recorded, high single-bit rate, contained ECC),
# which the GPU survives until a reset. One list: the recording rule gpu:xid_fatal:bool and docs/metrics.md must
# name the same codes (tests/rules/test_rules_fatal_xids.py).
FATAL_XIDS = (46, 48, 62, 63, 64, 74, 79, 92, 94, 95, 109, 110, 119, 120, 136, 140, 143, 144, 145, 146, 147, 148, 149,
              150, 151, 154, 155, 156, 158, 160)


def may_take_work(xid: np.ndarray, memory_unhealthy: np.ndarray) -> np.ndarray:
    """Per GPU: no fatal XID (`FATAL_XIDS`) and memory healthy: the rule of `ClusterSnapshot.healthy`, also applied
    by the scheduler's facts (`balancer.telemetry.node_facts.unhealthy`) to the arrays a snapshot would hold."""
    return ~np.isin(xid, FATAL_XIDS) & ~np.asarray(memory_unhealthy, dtype=bool)


class _ByOwner(Mapping):
    """{owner: its workloads, in the order of `workloads`}, read-only, owners in order of first appearance. The
    groups are positions in one array and a group's tuple is built when asked: a tuple per owner (20,000 a cycle
    at 10,000 GPUs, where each shared pod is its own owner) cost more than the planner asks for, and every cycle's
    snapshot, freed only by a full collection, kept them for Python's collector to walk."""

    __slots__ = ("_code", "_order", "_start", "_ws")

    def __init__(self, workloads: tuple[Workload, ...]) -> None:
        owners = list(map(attrgetter("owner"), workloads))
        self._code = {o: i for i, o in enumerate(dict.fromkeys(owners))}
        codes = np.fromiter(map(self._code.__getitem__, owners), dtype=np.int64, count=len(owners))
        self._order = np.argsort(codes, kind="stable")
        self._start = np.concatenate(([0], np.cumsum(np.bincount(codes, minlength=len(self._code)))))
        self._ws = workloads

    def __getitem__(self, owner: str) -> tuple[Workload, ...]:
        c = self._code[owner]
        return tuple(map(self._ws.__getitem__, self._order[self._start[c]:self._start[c + 1]].tolist()))

    def __iter__(self) -> Iterator[str]:
        return iter(self._code)

    def __len__(self) -> int:
        return len(self._code)


@dataclass(frozen=True, kw_only=True, eq=False)
class ClusterSnapshot:
    """What the controller knows at `time`; arrays are per GPU, in the order of `gpus`, and read-only."""

    time: float
    nodes: tuple[Node, ...]
    gpus: tuple[Gpu, ...]
    temperature_c: np.ndarray
    memory_temperature_c: np.ndarray
    slowdown_temp_c: np.ndarray
    power_w: np.ndarray
    power_limit_w: np.ndarray
    sm_active: np.ndarray   # NaN: unknown, the board has none (`MAY_BE_UNKNOWN`)
    mem_used_mib: np.ndarray
    mem_total_mib: np.ndarray
    sm_clock_mhz: np.ndarray
    clock_event_reasons: np.ndarray
    xid: np.ndarray
    sample_age_s: np.ndarray
    # per GPU: an uncorrectable ECC error since its last reset, a row remap pending or failed; it must not receive
    # work. None (a source without these series, a board that does not report them): all healthy
    memory_unhealthy: np.ndarray = None  # type: ignore[assignment]
    workloads: tuple[Workload, ...] = ()
    placements: Mapping[str, tuple[int, ...]] = field(default_factory=lambda: MappingProxyType({}))
    services: Mapping[str, ServiceStatus] = field(default_factory=lambda: MappingProxyType({}))
    suspended_jobs: tuple[SuspendedJob, ...] | None = None  # None: this source cannot see suspended jobs
    disruption_budgets: tuple[DisruptionBudget, ...] | None = None  # None: this source cannot see them
    # the nodes the Kubernetes API still lists whose GPUs telemetry has forgotten (gone from it past
    # `forget_vanished_after_s`: `vanished.Absences.forgotten`) -> how many of their GPUs (0: unknown, a node known by
    # name only). Their pods are in neither `workloads` nor `placements`, so what runs there is unseen: the capacity
    # planner counts a service's replicas asked beyond those placed as running there, as many as those GPUs hold
    forgotten_nodes: Mapping[str, int] = field(default_factory=lambda: MappingProxyType({}))
    # the inference services with serving series but no finite demand (a stalled vLLM pod, fewer pods reporting than
    # ready: rules/serving/vllm.yaml records NaN) -> why, where the series tell. Not in `services`: never a NaN in
    # arithmetic, never read as 0 (idle). The capacity planner holds while a profiled one is here; co-location holds
    # for it; thermal relief goes on (`serving.read_services`). The capacity planner's plan adds the profiled services
    # with no series at all while their pods run (`capacity_loop.with_unseen`)
    demand_unknown: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # a shard's snapshot (`shard.restrict`): the services with a status in the fleet's that it leaves out, spread over
    # two shards (scaled by neither). Their demand is known: a status missing says nothing of their series here
    spread_services: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        n = len(self.gpus)
        unhealthy = self.memory_unhealthy
        object.__setattr__(self, "memory_unhealthy",
                           np.zeros(n, dtype=bool) if unhealthy is None else np.asarray(unhealthy) != 0)
        for name in GPU_ARRAYS:
            arr = np.array(getattr(self, name), copy=True)
            if arr.shape != (n,):
                raise ValueError(f"snapshot array {name} has shape {arr.shape}, expected ({n},)")
            arr.setflags(write=False)
            object.__setattr__(self, name, arr)
        for i, g in enumerate(self.gpus):
            if g.index != i:
                raise ValueError(f"gpu {g.uuid} has index {g.index} at position {i}")
        object.__setattr__(self, "placements", MappingProxyType(dict(self.placements)))
        object.__setattr__(self, "services", MappingProxyType(dict(self.services)))
        object.__setattr__(self, "demand_unknown", MappingProxyType(dict(self.demand_unknown)))
        object.__setattr__(self, "forgotten_nodes", MappingProxyType(dict(self.forgotten_nodes)))
        object.__setattr__(self, "spread_services", frozenset(self.spread_services))

    @property
    def n_gpus(self) -> int:
        return len(self.gpus)

    @cached_property
    def node_index(self) -> np.ndarray:
        """Per GPU: the position of its node in `nodes`."""
        pos = {n.name: i for i, n in enumerate(self.nodes)}
        return np.fromiter((pos[g.node] for g in self.gpus), dtype=np.int64, count=len(self.gpus))

    @cached_property
    def gpu_models(self) -> np.ndarray:
        """Per GPU: its catalogue model."""
        models = np.array([g.model for g in self.gpus], dtype=str)
        models.setflags(write=False)
        return models

    @cached_property
    def healthy(self) -> np.ndarray:
        """Per GPU: whether it may take new work (lent, counted as capacity, a migration's target): no fatal XID
        (`FATAL_XIDS`) and memory healthy (`memory_unhealthy`). Read-only."""
        ok = may_take_work(self.xid, self.memory_unhealthy)
        ok.setflags(write=False)
        return ok

    @cached_property
    def gpu_by_uuid(self) -> Mapping[str, int]:
        return MappingProxyType({g.uuid: g.index for g in self.gpus})

    @cached_property
    def workload_by_name(self) -> Mapping[str, Workload]:
        return MappingProxyType({w.name: w for w in self.workloads})

    @cached_property
    def gpu_milli_used(self) -> np.ndarray:
        """Per GPU: milli-GPUs requested by the workloads placed on it (1000 = whole GPU)."""
        used = np.zeros(len(self.gpus), dtype=np.int64)
        for w in self.workloads:
            idx = self.placements.get(w.name)
            if idx:
                np.add.at(used, np.asarray(idx, dtype=np.int64), w.gpu_milli)
        used.setflags(write=False)
        return used

    @cached_property
    def _workloads_by_gpu(self) -> Mapping[int, tuple[Workload, ...]]:
        by: dict[int, list[Workload]] = {}
        for w in self.workloads:
            for g in dict.fromkeys(self.placements.get(w.name, ())):
                by.setdefault(g, []).append(w)
        return MappingProxyType({g: tuple(ws) for g, ws in by.items()})

    @cached_property
    def workloads_by_owner(self) -> Mapping[str, tuple[Workload, ...]]:
        """Workloads grouped by `owner`, each group in the order of `workloads` (`_ByOwner`)."""
        return _ByOwner(self.workloads)

    @cached_property
    def suspended_by_name(self) -> Mapping[str, SuspendedJob]:
        """The jobs suspended to 0 workers (`suspended_jobs`) by name, the first listed where a name repeats: the
        minimum of a resume (`simulate`) and the namespace the guard reads for it (`safety_context`) are looked up
        here, not by a scan of the list per action."""
        by: dict[str, SuspendedJob] = {}
        for j in self.suspended_jobs or ():
            by.setdefault(j.name, j)
        return MappingProxyType(by)

    @cached_property
    def admission(self) -> Admission:
        """Where a workload may run by Kubernetes' rules (balancer/admission.py), with its per-snapshot caches."""
        return Admission(self)

    def admits(self, rules: NodeRules) -> np.ndarray:
        """Per node: whether a pod with `rules` may run there (`Admission.admits`)."""
        return self.admission.admits(rules)

    def affinity_admits(self, w: Workload, moved: Mapping[str, int] | None = None) -> np.ndarray:
        """Per node: whether `w`'s replacement may run there by required pod affinity, with this cycle's `moved`
        workloads (name -> target node position) counted on their targets (`Admission.affinity_admits`)."""
        return self.admission.affinity_admits(w, moved)

    @cached_property
    def node_position(self) -> Mapping[str, int]:
        """Per node name: its position in `nodes` (the first, should a name repeat)."""
        pos: dict[str, int] = {}
        for i, n in enumerate(self.nodes):
            pos.setdefault(n.name, i)
        return MappingProxyType(pos)

    def workloads_on(self, gpu_index: int) -> tuple[Workload, ...]:
        # an index built once per snapshot: the guard asks this per action, and a scan per call was O(n^2)
        return self._workloads_by_gpu.get(gpu_index, ())

    def replace(self, **changes: object) -> ClusterSnapshot:
        """A new snapshot with some fields changed (arrays are copied, the original stays untouched)."""
        values = {f.name: getattr(self, f.name) for f in fields(self)}
        values.update(changes)
        return ClusterSnapshot(**values)  # type: ignore[arg-type]


def placed(snap: ClusterSnapshot, owner: str, workload_class: WorkloadClass | None = None) -> bool:
    """Whether a pod of `owner` (of `workload_class`; None: any) is placed on a GPU: a service running is not gone,
    whatever its series say. The forecaster counts any of its pods (`forecast.service._running_unread`: one served by a
    StatefulSet without the workload-class label is BATCH unless a --services profile names its owner:
    `KubernetesWorkloads.services`); the capacity planner asks for its inference pods
    (`capacity_loop.unseen_services`), and `owner` "" there: some inference pod has no owner. One function for both:
    the forecaster's copy and the planner's had drifted apart only by that filter. Here, not in the forecaster's
    module, which the planner would import with every forecasting model and pandas for it."""
    return any(snap.placements.get(w.name) for w in snap.workloads_by_owner.get(owner, ())
               if workload_class is None or w.workload_class is workload_class)


@dataclass(frozen=True, kw_only=True, eq=False)
class Forecast:
    """Forecast demand (req/s) of one service for steps 1..h after `issued_at`, by quantile."""

    service: str
    issued_at: float
    step_s: float
    quantiles: Mapping[float, np.ndarray]

    def __post_init__(self) -> None:
        frozen = {}
        for q, arr in self.quantiles.items():
            a = np.array(arr, dtype=float, copy=True)
            a.setflags(write=False)
            frozen[float(q)] = a
        object.__setattr__(self, "quantiles", MappingProxyType(frozen))

    @property
    def horizon(self) -> int:
        return len(next(iter(self.quantiles.values()))) if self.quantiles else 0

    def window_max(self, quantile: float, start_s: float, end_s: float) -> float:
        """Largest forecast value of `quantile` over [issued_at + start_s, issued_at + end_s]."""
        arr = self.quantiles[quantile]
        lo = max(int(np.floor(start_s / self.step_s)) - 1, 0)
        hi = max(int(np.ceil(end_s / self.step_s)), lo + 1)
        window = arr[lo:hi]
        return float(window.max()) if window.size else float(arr[-1])
