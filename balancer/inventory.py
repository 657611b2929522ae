"""What a fleet is made of: nodes, GPUs, workloads, services, suspended jobs and disruption budgets.

Frozen dataclasses, one per thing the controller knows of (split from model.py): a `Node` and its `Gpu`s (the
topology), a `Workload` (one pod: an inference replica, a training worker or a batch job, of a `WorkloadClass`, with
the records gputide keeps on its job), a `ServiceStatus` (an inference service's load, latency and SLO), a
`SuspendedJob` (a training job gputide suspended, which has no pods to show it), a `DisruptionBudget` (a
PodDisruptionBudget as last reported), and what the Kubernetes API (`NodeMeta`) or telemetry (`NodeGpuFacts`) says
of a node besides. A `ClusterSnapshot` (`balancer.model`, which re-exports these) holds them, with the per-GPU
telemetry as read-only numpy arrays.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from types import MappingProxyType

from balancer.noderules import NO_AFFINITY, NO_RULES, NodeRules, PodAffinity, Selector


class WorkloadClass(StrEnum):
    INFERENCE = "inference"
    TRAINING = "training"
    BATCH = "batch"


@dataclass(frozen=True, slots=True, kw_only=True)
class Node:
    name: str
    gpu_model: str               # catalogue key (balancer.catalog)
    gpu_count: int
    cpu_milli: int = 64000
    memory_mib: int = 262144
    site: str = "site-a"
    pool: str = ""               # scheduling pool; defaults to the GPU model
    cooling: str = "air"         # air | liquid
    inlet_c: float = 25.0
    nvlink_domain_size: int = 0  # GPUs per NVLink island on this node (0 or 1: none)
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    taints: tuple[str, ...] = ()
    # {GPU uuid: watts} gputide has capped on this node and not given back (its `gputide.io/power-caps` annotation,
    # the durable record a restarted controller or a new leader gives them back from)
    power_caps: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    # when gputide's hot taint on this node expires (epoch seconds, its `gputide.io/hot-until` annotation; None: no
    # expiry recorded): the planner renews the taint of a node still hot before it passes (`TaintNode.renew`)
    hot_until: float | None = None

    @property
    def pool_name(self) -> str:
        return self.pool or self.gpu_model


@dataclass(frozen=True, slots=True)
class NodeMeta:
    """What the Kubernetes API says of a node that its metrics do not: labels, taints in kubectl's syntax
    (`key=value:Effect`), the power caps gputide set there (`Node.power_caps`) and its hot taint's expiry
    (`Node.hot_until`)."""

    labels: Mapping[str, str]
    taints: tuple[str, ...] = ()
    power_caps: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    hot_until: float | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class Gpu:
    index: int                   # position in ClusterSnapshot.gpus
    uuid: str
    node: str
    slot: int                    # index on its node (dcgm-exporter's `gpu` label)
    model: str                   # catalogue key
    pci_bus_id: str = ""
    nvlink_domain: int = -1      # fleet-wide NVLink island id, -1 for none


@dataclass(frozen=True, slots=True, kw_only=True)
class Workload:
    """One schedulable unit (a pod): an inference replica, a training worker or a batch job."""

    name: str                    # unique, "namespace/pod"
    workload_class: WorkloadClass
    namespace: str = "default"
    owner: str = ""              # the Deployment / Job / service it belongs to
    priority: int = 0
    gpus: int = 1
    gpu_milli: int = 1000        # per GPU; < 1000 means a shared (fractional) GPU
    gpu_memory_mib: int = 0      # per GPU
    cpu_milli: int = 0
    memory_mib: int = 0
    allowed_models: frozenset[str] | None = None   # None: any GPU model
    movable: bool = True
    protected: bool = False
    elastic_min: int = 0         # for elastic training: fewest workers the job can run with
    elastic_max: int = 0
    node_rules: NodeRules = NO_RULES   # its tolerations, node selector, required node affinity
    labels: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}), hash=False)   # for budgets
    pod_affinity: PodAffinity = NO_AFFINITY   # its required pod affinity and anti-affinity
    restarts_on_resize: bool = False   # its Job restarts every pod when resized (queued in Kueue, not elastic there,
    #                                    or its framework restarts them all: `gputide.io/resize-restarts`)
    # epoch seconds: its last checkpoint as its pod says (`gputide.io/last-checkpoint`), and when it started; NaN
    # where not known; +inf for a job that checkpoints on SIGTERM (`gputide.io/checkpoint-on-sigterm`: a shrink
    # loses nothing). A resize loses the work since the job's checkpoint (`capacity.since_checkpoint`)
    checkpointed_at: float = float("nan")
    started_at: float = float("nan")
    # its job's workers before gputide's hotspot shrink, as the job records it (`ScaleTraining.shrunk_from`, the Job's
    # `gputide.io/shrunk` annotation): what a restarted controller or a new leader gives back; 0: none. A record the
    # job's size no longer matches (resized since, by hand or by another planner) is void: `shrink_overridden`
    shrunk_from: int = 0
    shrink_overridden: bool = False
    # co-location's shrink of its job as the job records it (`balancer.colocation_record`, the Job's
    # `gputide.io/colocation-shrunk`): the workers before it and the services it made room for (comma-separated);
    # 0 / "": none. A record
    # the job's size no longer matches (resized since by someone else) is void: `colocation_overridden`
    colocation_from: int = 0
    colocation_service: str = ""
    colocation_overridden: bool = False

    def __post_init__(self) -> None:
        if self.gpus < 0 or not 0 <= self.gpu_milli <= 1000:
            raise ValueError(f"workload {self.name}: gpus={self.gpus}, gpu_milli={self.gpu_milli} out of range")

    def fits_model(self, model: str) -> bool:
        return self.allowed_models is None or model in self.allowed_models


@dataclass(frozen=True, slots=True)
class NodeGpuFacts:
    """What telemetry says of one node's GPUs, by slot (the `gpu` index): thermal headroom in °C below the
    slowdown temperature (fresh readings only), and the slots a pod is attributed to. For the secondary
    scheduler, whose Kubernetes view counts a node's free GPUs but knows neither which nor how hot."""

    headroom_c: Mapping[int, float]
    busy: frozenset[int] = frozenset()
    unhealthy: frozenset[int] = frozenset()   # slots with bad memory or health unknown: never free


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """A PodDisruptionBudget as the API server last reported it: the pods of `namespace` its `selector` selects may
    lose `disruptions_allowed` more of their number to evictions now."""

    name: str
    namespace: str
    selector: Selector
    disruptions_allowed: int

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.name}"

    def covers(self, w: Workload) -> bool:
        return w.namespace == self.namespace and self.selector.matches(w.labels)


@dataclass(frozen=True, slots=True, kw_only=True)
class ServiceStatus:
    """An inference service as the controller sees it: offered load, latency and its SLO."""

    name: str
    demand_rps: float
    p99_latency_s: float
    slo_latency_s: float
    replicas: int
    namespace: str = ""     # of its serving series, when they say (the actuator's namespace while no pod runs)
    # `replicas` is its workload's spec.replicas (`gputide_inference_replicas`), which a rolling update's surge pods
    # never raise; False: counted from its pods, or unsaid (the capacity planner reads a cap's end only from the first)
    replicas_from_spec: bool = False
    # what the HPA that scales it keeps on its own metrics, gputide's floor aside (`k8s_hpa_wants`; its replicas where
    # that is unknown: nothing lent); None: no HPA scales it, or this source does not read HPAs
    hpa_wants: int | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class SuspendedJob:
    """An elastic training job that gputide suspended (0 workers): it has no pods, so no metrics show it, but it
    still exists and wants its GPUs back. Telemetry sources that can see such jobs list them in the snapshot;
    only then may the capacity planner suspend a job (it must be able to find it again to resume it)."""

    name: str                    # the job's name, as its workers' `Workload.owner`
    namespace: str = "default"
    elastic_min: int = 0
    elastic_max: int = 0
    gpus_per_worker: int = 1
    priority: int = 0
    allowed_models: frozenset[str] | None = None
