"""`SimCluster`: the embedded GPU cluster every demo, scenario and benchmark runs on.

State lives in per-GPU numpy arrays (fleet order) and a small set of pod records; `step()` advances the whole
fleet with array operations only (see `physics` for power/clock/temperature and `workloads` for latency and
training progress). Workload operations (`place`, `evict`, `migrate`, `scale_*`, in `ops`) and faults (in `faults`)
mutate the records and mark the slot table dirty. Everything random comes from one `numpy.random.Generator` seeded at
construction, so a run is reproducible by seed.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

import numpy as np

from balancer.colocation_record import ColocationRecord
from balancer.fleet import Fleet
from balancer.model import ClusterSnapshot, Node, NodeMeta, ServiceStatus, SuspendedJob, Workload
from balancer.sim import physics
from balancer.sim.accounting import Accounting
from balancer.sim.faults import Faults
from balancer.sim.memory import MemoryHealth
from balancer.sim.ops import WorkloadOps
from balancer.sim.pods import EMPTY, GENERIC, INFERENCE, TRAINING, Pod, SlotTable
from balancer.sim.scheduler import SchedulerView, first_fit
from balancer.sim.workloads import (
    BATCH_MEM,
    BATCH_SM,
    INFERENCE_INTERFERENCE,
    INFERENCE_MEM,
    INFERENCE_SM,
    STALLED_MEM,
    STALLED_SM,
    TRAINING_INTERFERENCE,
    TRAINING_MEM,
    TRAINING_SM,
    WARMUP_MEM,
    WARMUP_SM,
    ServiceSpec,
    TrainingJobSpec,
    inference_step,
)

Scheduler = Callable[[SchedulerView, list[Workload]], list[tuple[str, tuple[int, ...]]]]
TAINT = "gputide.io/hot=true:NoSchedule"
# slot states: 0 serving replica, 1 warming replica, 2 running training worker, 3 stalled worker, 4 generic pod
_SM_BY_STATE = np.array([INFERENCE_SM, WARMUP_SM, TRAINING_SM, STALLED_SM, BATCH_SM])
_MEM_BY_STATE = np.array([INFERENCE_MEM, WARMUP_MEM, TRAINING_MEM, STALLED_MEM, BATCH_MEM])


class SimCluster(WorkloadOps, Faults):
    """A simulated GPU cluster. See the package docstring (`balancer.sim`) for the API."""

    def __init__(self, fleet: Fleet, *, seed: int = 0, step_s: float = 60.0, start_time: float = 0.0) -> None:
        if step_s <= 0:
            raise ValueError("step_s must be positive")
        self.fleet = fleet
        self.seed = seed
        self.step_s = float(step_s)
        self.time = float(start_time)
        self.start_time = float(start_time)
        self._rng = np.random.default_rng(seed)
        self._p = p = physics.GpuParams.from_fleet(fleet)
        n = fleet.n_gpus
        self.n_gpus = n
        self.node_index = p.node_index
        self.gpu_model = np.array([g.model for g in fleet.gpus], dtype=object)
        models = sorted(set(self.gpu_model.tolist()))
        self._model_idx = np.array([models.index(m) for m in self.gpu_model.tolist()], dtype=np.int64)
        self._models = models
        self._node_pos = {nd.name: i for i, nd in enumerate(fleet.nodes)}
        # per-node cooling state (faults change these)
        self.node_inlet_rise_c = np.zeros(len(fleet.nodes))
        self.node_resistance_factor = np.ones(len(fleet.nodes))
        self._cooling_until: dict[int, float] = {}
        self.node_tainted = np.zeros(len(fleet.nodes), dtype=bool)
        # node -> when its hot taint expires (a Kubernetes node's gputide.io/hot-until); a taint without one never does
        self.hot_until: dict[str, float] = {}
        self.power_caps: dict[int, float] = {}   # GPU -> the cap gputide set (a node's gputide.io/power-caps)
        # per-GPU state
        inlet = p.node_inlet_c[p.node_index]
        self.temperature_c = inlet + p.resistance * p.idle_w
        self.memory_temperature_c = self.temperature_c + 0.4 * p.mem_offset_c
        self.power_w = p.idle_w.copy()
        self.tdp_w = p.tdp_w
        self.min_power_limit_w = p.min_power_limit_w
        self.slowdown_temp_c = p.slowdown_c
        self.shutdown_temp_c = p.shutdown_c
        self.power_limit_w = p.tdp_w.copy()
        self.sm_active = np.zeros(n)
        self.gpu_util = np.zeros(n)
        self.mem_total_mib = p.mem_total_mib
        self.mem_used_mib = np.zeros(n)
        self.sm_clock_mhz = p.max_clock_mhz * physics.IDLE_CLOCK
        self.clock_event_reasons = np.full(n, physics.IDLE, dtype=np.int64)
        self.clock_factor = np.ones(n)
        self.energy_mj = np.zeros(n)
        self.xid = np.zeros(n, dtype=np.int64)
        self.online = np.ones(n, dtype=bool)
        self.healthy = np.ones(n, dtype=bool)
        self.used_milli = np.zeros(n, dtype=np.int64)
        self.memory = MemoryHealth(self.gpu_model.tolist())   # ECC counters and row remapper
        # workloads
        self._pods: dict[str, Pod] = {}
        self._pending: dict[str, None] = {}
        self._svc: list[ServiceSpec] = []
        self._svc_pos: dict[str, int] = {}
        self._svc_target: list[int] = []
        self._svc_next: list[int] = []
        self._svc_rate = np.zeros((0, len(models)))
        self._svc_slo = np.zeros(0)
        self._svc_base = np.zeros(0)
        self._svc_demand = np.zeros(0)
        self._svc_p99 = np.zeros(0)
        self._jobs: list[TrainingJobSpec] = []
        self._job_pos: dict[str, int] = {}
        self._job_target: list[int] = []
        self._job_next: list[int] = []
        self.shrink_records: dict[int, tuple[int, int]] = {}   # job -> (workers before a hotspot shrink, left)
        self.colocation_records: dict[int, ColocationRecord] = {}   # job -> co-location's shrink of it
        self.acct = Accounting()
        self._table: SlotTable = EMPTY
        self._dirty = False
        self._sched_dirty = False
        self.placement_version = 0      # bumps on every bind/unbind (caches key on it)
        self._scheduler: Scheduler = first_fit
        self._nodes_cache: tuple[Node, ...] | None = None

    # ---- read-only views ---------------------------------------------------------------------------------------
    @property
    def services(self) -> Mapping[str, ServiceSpec]:
        return MappingProxyType({s.name: s for s in self._svc})

    @property
    def training_jobs(self) -> Mapping[str, TrainingJobSpec]:
        return MappingProxyType({j.name: j for j in self._jobs})

    @property
    def saves_on_sigterm(self) -> np.ndarray:
        """Per training job (in `training_jobs` order): whether it saves a checkpoint on SIGTERM, so a shrink loses
        nothing (`TrainingJobSpec.checkpoint_on_sigterm`)."""
        return np.fromiter((j.checkpoint_on_sigterm for j in self._jobs), dtype=bool, count=len(self._jobs))

    @property
    def workloads(self) -> Mapping[str, Workload]:
        return MappingProxyType({k: p.workload for k, p in self._pods.items()})

    @property
    def placements(self) -> Mapping[str, tuple[int, ...]]:
        return MappingProxyType({k: p.gpus for k, p in self._pods.items() if p.gpus is not None})

    @property
    def pending(self) -> tuple[str, ...]:
        return tuple(self._pending)

    def replicas(self, service: str) -> int:
        return self._svc_target[self._svc_index(service)]

    def workers(self, job: str) -> int:
        return self._job_target[self._job_index(job)]

    # ---- time --------------------------------------------------------------------------------------------------
    def advance_to(self, t: float) -> None:
        while self.time < t - 1e-9:
            self.step()

    def step(self, dt: float | None = None) -> None:
        """Advance the whole cluster by `dt` seconds (default `step_s`)."""
        dt = self.step_s if dt is None else float(dt)
        if dt <= 0:
            raise ValueError("dt must be positive")
        self._expire_cooling_faults()
        if self._pending and self._sched_dirty:
            self.schedule()
        if self._dirty:
            self._table.flush()
            self._table = SlotTable.build([p for p in self._pods.values() if p.gpus is not None])
            self._dirty = False
        tb, p, n, t = self._table, self._p, self.n_gpus, self.time
        g, share, kind, owner = tb.slot_gpu, tb.slot_share, tb.slot_kind, tb.slot_owner
        c_prev = self.clock_factor
        is_inf, is_train = kind == INFERENCE, kind == TRAINING
        has_train = np.bincount(g[is_train], minlength=n) > 0
        has_inf = np.bincount(g[is_inf], minlength=n) > 0

        # inference: capacity of each ready replica, then the queueing model per service
        n_svc = len(self._svc)
        self._svc_demand = np.array([max(float(s.demand(t)), 0.0) for s in self._svc], dtype=float)
        inf_owner = np.where(is_inf, owner, 0)
        slot_mu = np.where(is_inf, self._svc_rate[inf_owner, self._model_idx[g]] if n_svc else 0.0, 0.0)
        slot_mu = slot_mu * c_prev[g] * np.where(has_train[g], INFERENCE_INTERFERENCE, 1.0) * share
        pod_ready = (tb.pod_kind == INFERENCE) & (tb.pod_ready_at <= t)
        pod_mu = np.bincount(tb.slot_pod, weights=slot_mu, minlength=len(tb.pods))
        res = inference_step(
            demand_rps=self._svc_demand, pod_service=tb.pod_owner[pod_ready], pod_mu=pod_mu[pod_ready],
            slo_s=self._svc_slo, base_s=self._svc_base, dt=dt,
        )
        self._svc_p99 = res.p99_s
        rho = np.minimum(res.rho, 1.0)
        slot_ready = pod_ready[tb.slot_pod]

        # training: a job runs while at least elastic_min (>= 1) workers are placed; the slowest worker gates it
        n_jobs = len(self._jobs)
        job_workers = np.bincount(tb.pod_owner[tb.pod_kind == TRAINING], minlength=n_jobs)
        running = (job_workers >= self.acct.job_min_workers) & ~self.acct.job_done
        # per whole GPU; the job's GPUs are counted in shares (job_slots), once
        slot_rate = p.training_tput[g] * c_prev[g] * np.where(has_inf[g], TRAINING_INTERFERENCE, 1.0)
        job_min = np.full(n_jobs, np.inf)
        np.minimum.at(job_min, owner[is_train], slot_rate[is_train])
        job_slots = np.bincount(owner[is_train], weights=share[is_train], minlength=n_jobs)
        speed = np.where(running, job_slots * np.where(np.isfinite(job_min), job_min, 0.0), 0.0)
        slot_running = np.where(is_train, running[np.where(is_train, owner, 0)] if n_jobs else False, False)

        # per-slot activity -> per-GPU activity: a slot's state indexes the activity tables
        state = np.where(is_inf, np.where(slot_ready, 0, 1), np.where(is_train, np.where(slot_running, 2, 3), 4))
        load = np.where(state == 0, rho[inf_owner], 1.0) if n_svc else 1.0
        sm_slot = _SM_BY_STATE[state] * load
        mem_slot = _MEM_BY_STATE[state] * load
        sm = np.minimum(np.bincount(g, weights=sm_slot * share, minlength=n), 1.0)
        mem = np.minimum(np.bincount(g, weights=mem_slot * share, minlength=n), 1.0)
        busy = (np.bincount(g, minlength=n) > 0) & self.online

        ni = self.node_index
        inlet = p.node_inlet_c[ni] + self.node_inlet_rise_c[ni]
        out = physics.step(
            p, temperature_c=self.temperature_c, inlet_c=inlet,
            resistance=p.resistance * self.node_resistance_factor[ni],
            power_limit_w=self.power_limit_w, sm=sm, mem=mem, busy=busy, online=self.online, dt=dt,
            noise=self._rng.normal(0.0, physics.TEMP_NOISE_C, n),
        )
        power_noise = 1.0 + self._rng.normal(0.0, physics.POWER_NOISE, n)
        self.temperature_c = out.temperature_c
        self.power_w = np.minimum(out.power_w * np.where(busy, power_noise, 1.0),
                                  np.maximum(self.power_limit_w, out.power_w))
        self.clock_factor = np.where(self.online, out.clock_factor, 1.0)
        self.clock_event_reasons = out.reasons
        self.sm_active = np.where(self.online, sm, 0.0)
        self.gpu_util = np.where(busy, np.minimum(sm * 1.08 + 0.02, 1.0), 0.0)
        self.memory_temperature_c = self.temperature_c + p.mem_offset_c * (0.4 + 0.6 * mem) * self.online
        self.sm_clock_mhz = np.where(self.online,
                                     p.max_clock_mhz * np.where(busy, out.clock_factor, physics.IDLE_CLOCK), 0.0)
        self.energy_mj = self.energy_mj + self.power_w * dt * 1000.0

        # generic pods count their work down at the pod's mean clock factor
        pod_c = np.bincount(tb.slot_pod, weights=out.clock_factor[g], minlength=len(tb.pods)).astype(float)
        pod_c /= np.maximum(np.bincount(tb.slot_pod, minlength=len(tb.pods)), 1)
        generic = tb.pod_kind == GENERIC
        tb.pod_remaining[generic] -= dt * pod_c[generic]

        self.acct.record_step(self, dt=dt, inference=res, speed=speed, running=running, is_inf=is_inf,
                              is_train=is_train, slot_owner=owner, slot_gpu_s=share * dt)
        self.time = t + dt
        self._after_step(tb, generic)

    def _after_step(self, tb: SlotTable, generic: np.ndarray) -> None:
        for j in np.flatnonzero(self.acct.job_newly_done):
            self._finish_job(int(j))
        for i in np.flatnonzero(generic & (tb.pod_remaining <= 0)):
            self._remove_pod(tb.pods[i].workload.name)
        hot = np.flatnonzero(self.online & (self.temperature_c >= self._p.shutdown_c))
        for gpu in hot:  # thermal shutdown: the board drops off the bus
            self.fail_gpu(int(gpu), xid=79)

    # ---- snapshot and status -------------------------------------------------------------------------------
    def snapshot(self, sample_age_s: float = 0.0) -> ClusterSnapshot:
        """Ground truth as the controller would see it through fresh telemetry."""
        if self._nodes_cache is None:
            self._nodes_cache = _with_meta(self.fleet, self.node_tainted, self.power_caps, self.hot_until)
        return ClusterSnapshot(
            time=self.time, nodes=self._nodes_cache, gpus=self.fleet.gpus,
            temperature_c=self.temperature_c, memory_temperature_c=self.memory_temperature_c,
            slowdown_temp_c=self.slowdown_temp_c, power_w=self.power_w, power_limit_w=self.power_limit_w,
            sm_active=self.sm_active, mem_used_mib=self.mem_used_mib, mem_total_mib=self.mem_total_mib,
            sm_clock_mhz=self.sm_clock_mhz, clock_event_reasons=self.clock_event_reasons, xid=self.xid,
            sample_age_s=np.full(self.n_gpus, float(sample_age_s)), memory_unhealthy=self.memory.unhealthy,
            workloads=self._recorded(self._pods.values()),
            placements={k: p.gpus for k, p in self._pods.items() if p.gpus is not None},
            services=self.service_status(),
            suspended_jobs=self.suspended_jobs(),
        )

    def suspended_jobs(self) -> tuple[SuspendedJob, ...]:
        """Elastic jobs scaled to 0 workers and not finished (what a Kubernetes source lists as suspended Jobs)."""
        return tuple(
            SuspendedJob(name=j.name, namespace=j.namespace, elastic_min=j.elastic_min, elastic_max=int(j.elastic_max),
                         gpus_per_worker=j.gpus_per_worker, priority=j.priority, allowed_models=j.allowed_models)
            for i, j in enumerate(self._jobs)
            if j.elastic_max and self._job_target[i] == 0 and not self.acct.job_done[i])

    def service_status(self) -> dict[str, ServiceStatus]:
        out = {}
        for i, s in enumerate(self._svc):
            demand = float(self._svc_demand[i]) if i < len(self._svc_demand) else max(float(s.demand(self.time)), 0.0)
            p99 = float(self._svc_p99[i]) if i < len(self._svc_p99) else s.base_latency_s
            out[s.name] = ServiceStatus(name=s.name, demand_rps=demand, p99_latency_s=p99,
                                        slo_latency_s=s.slo_latency_s, replicas=self._svc_target[i])
        return out

    def ready_replicas(self) -> dict[str, int]:
        """Replicas per service that serve now: placed and warm (`ServiceStatus.replicas` counts what was asked,
        pending and warming replicas included; a ReplicaSet's `availableReplicas` is this)."""
        out = {s.name: 0 for s in self._svc}
        for p in self._pods.values():
            if p.kind == INFERENCE and p.gpus is not None and p.ready_at <= self.time:
                out[self._svc[p.owner].name] += 1
        return out

    def stats(self) -> dict:
        """Cumulative accounting since the start (see `balancer.sim.accounting`)."""
        return self.acct.summary(self)

    # ---- power and nodes ---------------------------------------------------------------------------------------
    def set_power_limit(self, gpu: int, watts: float) -> float:
        applied = float(np.clip(watts, self.min_power_limit_w[gpu], self.tdp_w[gpu]))
        self.power_limit_w[gpu] = applied
        return applied

    def cap_power(self, gpu: int, watts: float | None) -> float:
        """gputide's cap on `gpu`, recorded on its node (`Node.power_caps`, a Kubernetes node's annotation), or (None)
        given back: its default limit, if gputide capped it. Returns the GPU's limit now."""
        if watts is None and self.power_caps.pop(gpu, None) is None:
            return float(self.power_limit_w[gpu])
        if watts is not None:
            self.power_caps[gpu] = float(watts)
        self._nodes_cache = None
        return self.set_power_limit(gpu, self.tdp_w[gpu] if watts is None else watts)

    def add_taint(self, node: str, until: float | None = None) -> None:
        """gputide's hot taint on `node`, expiring at `until` (as the Kubernetes actuator writes it, renewed by
        writing it again); None: a taint that never expires."""
        self.node_tainted[self._node(node)] = True
        if until is None:
            self.hot_until.pop(node, None)
        else:
            self.hot_until[node] = float(until)
        self._nodes_cache = None

    def remove_taint(self, node: str) -> None:
        self.node_tainted[self._node(node)] = False
        self.hot_until.pop(node, None)
        self._nodes_cache = None
        self._sched_dirty = True

    def has_taint(self, node: str) -> bool:
        return bool(self.node_tainted[self._node(node)])

    def expired_taints(self) -> list[str]:
        """Nodes whose hot taint's expiry has passed (what housekeeping removes, `SimActuator.housekeeping`)."""
        return sorted(n for n, until in self.hot_until.items() if until <= self.time)

    def node_meta(self) -> dict[str, NodeMeta]:
        """What the Kubernetes node list would say of each node (taints, power caps, hot-taint expiry): a telemetry
        source's `node_overrides` where the simulator plays the Kubernetes API."""
        if self._nodes_cache is None:
            self._nodes_cache = _with_meta(self.fleet, self.node_tainted, self.power_caps, self.hot_until)
        return {n.name: NodeMeta(labels=n.labels, taints=n.taints, power_caps=n.power_caps, hot_until=n.hot_until)
                for n in self._nodes_cache}

    # ---- helpers ---------------------------------------------------------------------------------------------
    def _node(self, node: str) -> int:
        if node not in self._node_pos:
            raise KeyError(f"unknown node {node!r}")
        return self._node_pos[node]

    def scheduler_view(self) -> SchedulerView:
        schedulable = self.online & self.healthy & ~self.node_tainted[self.node_index]
        return SchedulerView(
            fleet=self.fleet, time=self.time, gpu_model=self.gpu_model, node_index=self.node_index,
            schedulable=schedulable, free_milli=1000 - self.used_milli,
            free_mem_mib=self.mem_total_mib - self.mem_used_mib, temperature_c=self.temperature_c.copy(),
        )


def _with_meta(fleet: Fleet, tainted: np.ndarray, power_caps: Mapping[int, float],
               hot_until: Mapping[str, float]) -> tuple[Node, ...]:
    """The fleet's nodes carrying gputide's hot taint (with its expiry) and power caps, as a Kubernetes Node carries
    them."""
    from dataclasses import replace

    caps: dict[str, dict[str, float]] = {}
    for g, watts in power_caps.items():
        caps.setdefault(fleet.gpus[g].node, {})[fleet.gpus[g].uuid] = watts
    return tuple(replace(nd, taints=(*nd.taints, TAINT) if t and TAINT not in nd.taints else nd.taints,
                         power_caps=MappingProxyType(caps.get(nd.name, {})),
                         hot_until=hot_until.get(nd.name) if t else None) if t or nd.name in caps else nd
                 for nd, t in zip(fleet.nodes, tainted.tolist(), strict=True))
