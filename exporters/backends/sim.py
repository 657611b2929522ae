"""Sim backend: publishes a `SimCluster`'s GPUs as if NVML/DCGM had read them.

One process can serve the whole simulated fleet (every node's GPUs, ``Hostname`` per node) or a single node
(``node=``, as a DaemonSet pod would). With ``speed`` set, each read first advances simulated time to
``start + wall-clock elapsed x speed``; with ``speed=None`` the caller drives the simulator (the demo and the
loop step it in-process) and should pass the ``lock`` it holds while stepping.

Readings are rounded as dcgm-exporter reports them (integer °C, MiB, MHz and %). Every field of
`exporters.collector.GPU_FIELDS` is published but ``DCGM_FI_DEV_FB_RESERVED`` (`NOT_SIMULATED`): the simulator's
memory is total = used + free, and it models no memory the driver reserves. An offline GPU (fallen off the
bus) keeps only ``DCGM_FI_DEV_XID_ERRORS``, every other field is reported as a read error, as NVML would. The
row-remapper fields of a model without one (before Ampere), which NVML answers with NotSupported, are reported as
unsupported (no series, no error), online or not, as the NVML backend reports them.

A GPU whose node the fleet spec partitions (``mig:``, `balancer.fleet`) is in MIG mode: as with the NVML backend on
a Hopper board, it has no GPU-level utilisation or SM activity (both unsupported), and ``DCGM_FI_PROF_SM_ACTIVE``
per GPU instance (`GpuReadings.instances`: ``GPU_I_ID`` 1, 2, ... in the declared order, ``GPU_I_PROFILE`` its
profile). The simulator itself knows no instances (its pods hold whole GPUs, and the join table names no
instance), so the GPU's simulated SM activity is split over its instances as if its work filled them in order:
``activity x the instances' compute slices`` is poured into the first instance up to 100 %, the rest into the
next, and so on. Their mean weighted by compute slices, which the recording rules compute as the GPU's
``gpu:sm_active:ratio``, is the simulated GPU's activity again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from contextlib import nullcontext

import numpy as np

from balancer import catalog, mig
from balancer.model import Gpu
from balancer.sim import SimCluster
from exporters.backends.base import GpuIdentity, GpuReadings, InstanceReading, ServiceReading, WorkloadInfo

REMAPPER_FIELDS = ("DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
                   "DCGM_FI_DEV_ROW_REMAP_FAILURE", "DCGM_FI_DEV_ROW_REMAP_PENDING")
MIG_FIELDS = ("DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE")   # NotSupported per GPU in MIG mode
# not simulated: the simulator's memory is total = used + free, with nothing reserved by the driver to report
NOT_SIMULATED = ("DCGM_FI_DEV_FB_RESERVED",)
DRIVER_VERSION = "580.159.04"   # the DCGM_FI_DRIVER_VERSION label: the fleet spec names none; the real H200's (bench/)


class MigLayout:
    """The GPU instances of the MIG GPUs among `gpus` (by their node's partition in `mig_of`), one array entry per
    instance; `read` splits each GPU's SM activity over its instances (module docstring)."""

    def __init__(self, gpus: tuple[Gpu, ...], mig_of: Mapping[str, tuple[str, ...]]) -> None:
        rows = []
        for k, g in enumerate(gpus):
            partition = mig_of.get(g.node, ())
            sizes = [mig.compute_slices(p) for p in partition]
            rows.extend((k, str(n + 1), p, size, sum(sizes[:n]), sum(sizes))
                        for n, (p, size) in enumerate(zip(partition, sizes)))
        self._pos = np.array([r[0] for r in rows], dtype=np.int64)
        self.gpus = np.unique(self._pos)   # positions of the MIG GPUs
        self._ids = [r[1] for r in rows]
        self._profiles = [r[2] for r in rows]
        self._slices, self._before, self._covered = (np.array([r[i] for r in rows], dtype=float) for i in (3, 4, 5))

    def read(self, sm_active: np.ndarray, online: np.ndarray) -> tuple[InstanceReading, ...]:
        """Each instance of an online GPU: its share of the GPU's work over its own slices, rounded as dcgm-exporter
        rounds SM activity."""
        if not self._ids:
            return ()
        work = sm_active[self._pos] * self._covered - self._before
        value = np.round(np.clip(work / self._slices, 0.0, 1.0), 4)
        keep = online[self._pos] & np.isfinite(value)
        return tuple(InstanceReading(k, gi, p, v) for k, gi, p, v, ok in zip(
            self._pos.tolist(), self._ids, self._profiles, value.tolist(), keep.tolist()) if ok)


class SimBackend:
    def __init__(self, sim: SimCluster, *, node: str | None = None, speed: float | None = None,
                 clock: Callable[[], float] = time.monotonic, lock: threading.Lock | None = None) -> None:
        self.sim = sim
        self.node = node
        self.speed = speed
        self._clock = clock
        self._lock = lock if lock is not None or not speed else threading.Lock()
        self._wall0 = clock()
        self._sim0 = sim.time
        gpus = sim.fleet.gpus if node is None else tuple(g for g in sim.fleet.gpus if g.node == node)
        if not gpus:
            raise ValueError(f"node {node!r} has no GPUs in fleet {sim.fleet.name}")
        self._idx = np.array([g.index for g in gpus], dtype=np.int64)
        self._all = node is None
        self._remapper = sim.memory.row_remapping[self._idx].tolist()   # per position here
        self._uuid_of = {g.index: g.uuid for g in gpus}
        self._wl_version = -1
        self._wl: tuple[WorkloadInfo, ...] = ()
        self.identity = tuple(
            GpuIdentity(gpu=str(g.slot), uuid=g.uuid, pci_bus_id=g.pci_bus_id, device=f"nvidia{g.slot}",
                        model_name=catalog.CATALOGUE[g.model].model_name, hostname=g.node,
                        driver_version=DRIVER_VERSION)
            for g in gpus)
        self._mig = MigLayout(gpus, sim.fleet.mig)
        in_mig = set(self._mig.gpus.tolist())
        self._lacks = [(() if has else REMAPPER_FIELDS) + (MIG_FIELDS if k in in_mig else ())
                       for k, has in enumerate(self._remapper)]   # NVML's NotSupported: no remapper; MIG mode
        self._unsupported = tuple((g.uuid, name) for g, lacks in zip(self.identity, self._lacks) for name in lacks)

    def read(self) -> GpuReadings:
        with self._lock or nullcontext():
            if self.speed:
                self.sim.advance_to(self._sim0 + (self._clock() - self._wall0) * self.speed)
            return self._read()

    def _read(self) -> GpuReadings:
        s, i = self.sim, (slice(None) if self._all else self._idx)
        online = s.online[i]
        mem = s.memory
        remap = np.where(mem.row_remapping[i], 0.0, np.nan)   # NaN: this model has no row remapper
        values = {
            "DCGM_FI_DEV_GPU_TEMP": np.round(s.temperature_c[i]),
            "DCGM_FI_DEV_MEMORY_TEMP": np.round(s.memory_temperature_c[i]),
            "DCGM_FI_DEV_SLOWDOWN_TEMP": s.slowdown_temp_c[i],
            "DCGM_FI_DEV_SHUTDOWN_TEMP": s.shutdown_temp_c[i],
            "DCGM_FI_DEV_POWER_USAGE": np.round(s.power_w[i], 3),
            "DCGM_FI_DEV_POWER_MGMT_LIMIT": s.power_limit_w[i],
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": np.floor(s.energy_mj[i]),
            "DCGM_FI_DEV_FB_USED": np.round(s.mem_used_mib[i]),
            "DCGM_FI_DEV_FB_FREE": np.round(s.mem_total_mib[i] - s.mem_used_mib[i]),
            "DCGM_FI_DEV_GPU_UTIL": np.round(s.gpu_util[i] * 100.0),
            "DCGM_FI_PROF_SM_ACTIVE": np.round(s.sm_active[i], 4),
            "DCGM_FI_DEV_SM_CLOCK": np.round(s.sm_clock_mhz[i]),
            "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": s.clock_event_reasons[i].astype(float),
            "DCGM_FI_DEV_XID_ERRORS": s.xid[i].astype(float),
            "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": mem.sbe_volatile[i].astype(float),
            "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": mem.dbe_volatile[i].astype(float),
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": remap + mem.remapped_correctable[i],
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": remap + mem.remapped_uncorrectable[i],
            "DCGM_FI_DEV_ROW_REMAP_FAILURE": remap + mem.remap_failure[i],
            "DCGM_FI_DEV_ROW_REMAP_PENDING": remap + mem.remap_pending[i],
        }
        for name in MIG_FIELDS:
            values[name][self._mig.gpus] = np.nan
        errors: list[tuple[str, str]] = []
        if not online.all():
            for k in np.flatnonzero(~online).tolist():
                errors.extend((self.identity[k].uuid, name) for name in values
                              if name != "DCGM_FI_DEV_XID_ERRORS" and name not in self._lacks[k])
            for name in list(values):
                if name != "DCGM_FI_DEV_XID_ERRORS":
                    values[name] = np.where(online, values[name], np.nan)
        return GpuReadings(identity=self.identity, values=values, errors=tuple(errors), unsupported=self._unsupported,
                           workloads=self._workloads(), instances=self._mig.read(s.sm_active[i], online),
                           services=self._services())

    def _workloads(self) -> tuple[WorkloadInfo, ...]:
        version = self.sim.placement_version
        if version != self._wl_version:
            self._wl_version, self._wl = version, self._build_workloads()
        return self._wl

    def _build_workloads(self) -> tuple[WorkloadInfo, ...]:
        out = []
        wl = self.sim.workloads
        for name, gpus in self.sim.placements.items():
            w = wl[name]
            pod = name.split("/", 1)[-1]
            for g in gpus:
                uuid = self._uuid_of.get(g)
                if uuid is not None:
                    out.append(WorkloadInfo(uuid=uuid, namespace=w.namespace, pod=pod,
                                            workload_class=str(w.workload_class)))
        return tuple(out)

    def _services(self) -> dict[str, ServiceReading]:
        if not self._all:
            return {}
        acct = self.sim.acct
        out = {}
        ready = self.sim.ready_replicas()
        for k, (name, st) in enumerate(self.sim.service_status().items()):
            out[name] = ServiceReading(requests_total=float(acct.svc_requests[k]),
                                       slo_violations_total=float(acct.svc_violations[k]),
                                       demand_rps=st.demand_rps, latency_p99_s=st.p99_latency_s,
                                       replicas=float(st.replicas), replicas_ready=float(ready[name]))
        return out
