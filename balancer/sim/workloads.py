"""Workload specs the simulator runs, and the vectorised inference-latency and training-progress models.

Inference (`ServiceSpec`). A service has replicas (pods of ``gpus_per_replica`` GPUs, ``gpu_milli`` each) and an
offered load ``demand(t)`` in req/s. A ready replica's service rate is ``mu = rps_per_gpu[model] x clock factor x
interference x gpu_milli/1000`` summed over its GPUs, where ``interference`` is ``INFERENCE_INTERFERENCE`` (0.7)
when the GPU also runs training. The load balancer splits the load in proportion to ``mu``, so every replica runs
at the same utilisation ``rho = lambda / sum(mu)``. Each replica is an M/M/1 queue whose latency is
``base_latency_s`` plus an exponential sojourn of rate ``d = mu - lambda``:

* fraction of requests over the SLO ``= exp(-d * (slo - base))`` when ``rho < 1``, else 1 (queueing collapse);
* p99 ``= base + ln(100) / d``; the service's p99 uses the traffic-weighted mean ``d`` over replicas and is
  capped at ``P99_CAP_S`` (a client timeout) when the queue collapses.

Warming replicas (the first ``warmup_s`` after placement) serve nothing. Requests with no ready replica count as
violations.

Training (`TrainingJobSpec`). A synchronous data-parallel job advances only while at least ``elastic_min`` workers
are placed; its speed is ``GPUs held x min over workers(training_tput[model] x clock factor x interference)``
(gpu_milli/1000 per GPU of each placed worker; the slowest worker gates every all-reduce;
``TRAINING_INTERFERENCE`` = 0.8 on a GPU shared with inference). Progress is in *A100-equivalent GPU-hours*: one
A100 SXM4 at full clock for one hour = 1.0. The job checkpoints every ``checkpoint_interval_s`` of running time;
an eviction, migration, failure or scale-down of a worker rolls the job back to its last checkpoint (counted as a
preemption and as lost work). A job with ``checkpoint_on_sigterm`` saves a checkpoint when a worker gets SIGTERM
(preemption-aware checkpointing within the grace period, as elastic PyTorch trainers on spot capacity do; on
Kubernetes its Job says so, `gputide.io/checkpoint-on-sigterm: "true"`): a scale-down (gputide's or an operator's),
an eviction or a migration of it loses nothing (`SimCluster._stop_worker`); a failed GPU still costs it the work
since its last checkpoint (a crash, no SIGTERM). Its pods show their checkpoint as always current
(`Workload.checkpointed_at` = +inf). The default is False: a trainer that does not say it checkpoints on SIGTERM is
taken to lose its work since its last checkpoint.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np

from balancer import catalog

INFERENCE_INTERFERENCE = 0.7
TRAINING_INTERFERENCE = 0.8
P99_CAP_S = 60.0
LN100 = math.log(100.0)

# SM activity / memory traffic a pod of each kind adds to its GPU (per whole GPU; scaled by gpu_milli)
INFERENCE_SM, INFERENCE_MEM = 0.92, 0.55
WARMUP_SM, WARMUP_MEM = 0.08, 0.3
TRAINING_SM, TRAINING_MEM = 0.9, 0.7
STALLED_SM, STALLED_MEM = 0.03, 0.05      # training worker waiting for peers
BATCH_SM, BATCH_MEM = 0.75, 0.5


def _zero(_t: float) -> float:
    return 0.0


@dataclass(frozen=True, kw_only=True)
class ServiceSpec:
    """An inference service. `demand` maps simulated time (s) to offered load (req/s)."""

    name: str
    namespace: str = "inference"
    slo_latency_s: float = 0.5
    base_latency_s: float = 0.1
    rps_per_gpu: Mapping[str, float] | None = None
    rps_a100: float = 20.0
    demand: Callable[[float], float] = _zero
    replicas: int = 1
    gpus_per_replica: int = 1
    gpu_milli: int = 1000
    gpu_memory_mib: int = 16384
    allowed_models: frozenset[str] | None = None
    priority: int = 100
    warmup_s: float = 300.0

    def __post_init__(self) -> None:
        if self.replicas < 0 or self.gpus_per_replica < 1 or not 0 < self.gpu_milli <= 1000:
            raise ValueError(f"service {self.name}: bad replicas/gpus_per_replica/gpu_milli")
        if self.slo_latency_s <= self.base_latency_s:
            raise ValueError(f"service {self.name}: slo_latency_s must exceed base_latency_s")

    def rate_on(self, model: str) -> float:
        """Requests/s one whole GPU of `model` serves at full clock."""
        if self.rps_per_gpu is not None and model in self.rps_per_gpu:
            return float(self.rps_per_gpu[model])
        return self.rps_a100 * catalog.CATALOGUE[model].inference_tput


@dataclass(frozen=True, kw_only=True)
class TrainingJobSpec:
    """An (elastic) training job of `workers` pods of `gpus_per_worker` GPUs each."""

    name: str
    namespace: str = "training"
    workers: int = 1
    gpus_per_worker: int = 1
    gpu_milli: int = 1000
    elastic_min: int = 1
    elastic_max: int | None = None
    checkpoint_interval_s: float = 1800.0
    priority: int = 10
    gpu_memory_mib: int = 40960
    allowed_models: frozenset[str] | None = None
    total_work_gpu_hours: float | None = None
    checkpoint_on_sigterm: bool = False   # saves a checkpoint on SIGTERM: a shrink loses nothing (module docstring)

    def __post_init__(self) -> None:
        if self.elastic_max is None:
            object.__setattr__(self, "elastic_max", self.workers)
        if not 0 <= self.elastic_min <= self.workers <= int(self.elastic_max or 0) or self.gpus_per_worker < 1:
            raise ValueError(f"job {self.name}: need 0 <= elastic_min <= workers <= elastic_max, gpus_per_worker >= 1")


@dataclass(frozen=True, slots=True, eq=False)
class InferenceResult:
    requests: np.ndarray        # per service, this step
    violations: np.ndarray
    p99_s: np.ndarray
    rho: np.ndarray             # per service utilisation (inf when no capacity)


def inference_step(*, demand_rps: np.ndarray, pod_service: np.ndarray, pod_mu: np.ndarray,
                   slo_s: np.ndarray, base_s: np.ndarray, dt: float) -> InferenceResult:
    """Latency model over all ready replicas at once. `pod_*` arrays are per ready replica."""
    with np.errstate(all="ignore"):  # tiny or zero capacities overflow to inf and are masked or capped
        return _inference(demand_rps, pod_service, pod_mu, slo_s, base_s, dt)


def _inference(demand_rps: np.ndarray, pod_service: np.ndarray, pod_mu: np.ndarray, slo_s: np.ndarray,
               base_s: np.ndarray, dt: float) -> InferenceResult:
    n = len(demand_rps)
    mu = np.bincount(pod_service, weights=pod_mu, minlength=n)
    has_mu, has_demand = mu > 0, demand_rps > 0
    rho = np.where(has_mu, demand_rps / np.where(has_mu, mu, 1.0), np.where(has_demand, np.inf, 0.0))
    pod_rho = rho[pod_service]
    pod_lambda = pod_rho * pod_mu
    stable = pod_rho < 1.0
    pod_d = np.where(stable, pod_mu * (1.0 - pod_rho), 0.0)
    frac = np.where(stable, np.exp(-pod_d * (slo_s - base_s)[pod_service]), 1.0)
    violations = np.bincount(pod_service, weights=np.where(stable, pod_lambda * frac * dt, 0.0), minlength=n)
    d_mean = np.bincount(pod_service, weights=np.where(stable, pod_lambda * pod_d, 0.0), minlength=n)
    d_mean = np.where(has_demand, d_mean / np.where(has_demand, demand_rps, 1.0), mu)
    positive = d_mean > 0
    p99 = np.where(positive, base_s + LN100 / np.where(positive, d_mean, 1.0), P99_CAP_S)
    p99 = np.where(has_demand, p99, base_s + np.where(has_mu, LN100 / np.where(has_mu, mu, 1.0), 0.0))
    collapsed = rho >= 1.0
    p99 = np.where(collapsed, P99_CAP_S, np.minimum(p99, P99_CAP_S))
    requests = demand_rps * dt
    violations = np.where(collapsed, requests, violations)
    return InferenceResult(requests=requests, violations=violations, p99_s=p99, rho=rho)
