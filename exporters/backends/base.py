"""What a GPU backend hands the collector: one `GpuReadings` per scrape.

A backend reads every GPU it can see and returns per-field numpy arrays in the order of its `identity` (the
dcgm-exporter labels of each GPU; they change only when the NVML backend initialises NVML again and finds a
different set, as a restart would: the collector rebuilds its label caches whenever the list changes). A value it could
not read is NaN and is listed in `errors` as ``(UUID, field)``; the collector then drops that one series and counts the
error, so one broken GPU never fails the scrape. A value the GPU does not have at all (NVML answered NotSupported: no
ECC on a GeForce board, no row remapper before Ampere, no memory temperature sensor on GDDR boards, ...) is NaN
too but listed in `unsupported` instead: its series is left out, as dcgm-exporter leaves it out, and it is no
error (the collector publishes the pairs as ``gputide_exporter_unsupported_field_info``).

Field keys are dcgm-exporter metric names (``DCGM_FI_DEV_GPU_TEMP`` ...) in dcgm-exporter's units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Protocol

import numpy as np

# dcgm-exporter's per-GPU labels; DCGM_FI_DRIVER_VERSION is the label its counters files declare (``label`` type)
LABEL_NAMES = ("gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION")


@dataclass(frozen=True, slots=True)
class GpuIdentity:
    """dcgm-exporter's per-GPU labels."""

    gpu: str
    uuid: str
    pci_bus_id: str
    device: str
    model_name: str
    hostname: str
    driver_version: str = ""   # "" when unknown: Prometheus reads an empty label as no label

    def labels(self) -> dict[str, str]:
        return dict(zip(LABEL_NAMES, (self.gpu, self.uuid, self.pci_bus_id, self.device, self.model_name,
                                      self.hostname, self.driver_version), strict=True))


@dataclass(frozen=True, slots=True)
class WorkloadInfo:
    """One row of the attribution join table: a pod on a GPU, on one of its MIG instances if `gpu_instance_id`."""

    uuid: str
    namespace: str
    pod: str
    workload_class: str
    gpu_instance_id: str = ""        # MIG: the GPU instance the pod holds (dcgm-exporter's GPU_I_ID)
    gpu_instance_profile: str = ""   # MIG: that instance's profile, e.g. "1g.10gb" (GPU_I_PROFILE); "" unknown

    def labels(self) -> dict[str, str]:
        out = {"UUID": self.uuid, "namespace": self.namespace, "pod": self.pod, "workload_class": self.workload_class}
        if self.gpu_instance_id:
            out["GPU_I_ID"] = self.gpu_instance_id
        if self.gpu_instance_profile:
            out["GPU_I_PROFILE"] = self.gpu_instance_profile
        return out


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A MIG device as NVML knows it: the GPU it is carved from, its GPU instance, that instance's profile."""

    parent_uuid: str   # "": not knowable now (`MIG_GPU_UNKNOWN`)
    gpu_instance_id: int | None   # None: its GPU known, its instance not asked (GPU stuck in NVML): held whole
    profile: str = ""   # e.g. "1g.10gb"; "" when NVML did not say


# A MIG UUID never seen on a GPU walked while some GPU is stuck in NVML: it may lie on that GPU, which cannot be asked
# (the call would hang), so its GPU is not known either: pod attribution counts it unresolved, not unmatched.
MIG_GPU_UNKNOWN = MigInstance("", None)


class MigLookup(Protocol):
    """The MIG device a device plugin's ID names (a MIG UUID, or ``<gpu index>:<mig index>``), or None."""

    def __call__(self, device_id: str, /) -> MigInstance | None: ...


@dataclass(frozen=True, slots=True)
class InstanceReading:
    """SM activity of one GPU instance of a MIG GPU (`gpu`: the GPU's position in `GpuReadings.identity`), relative
    to the instance's own SMs, published as ``DCGM_FI_PROF_SM_ACTIVE`` with dcgm-exporter's instance labels."""

    gpu: int
    gpu_instance_id: str
    profile: str   # e.g. "1g.10gb"; "" when NVML did not say
    sm_active: float


@dataclass(frozen=True, slots=True)
class ServiceReading:
    """Simulated serving series (real clusters get these from their serving stack)."""

    requests_total: float
    slo_violations_total: float
    demand_rps: float
    latency_p99_s: float
    replicas: float = math.nan  # asked for (a Deployment's spec.replicas)
    replicas_ready: float = math.nan  # placed and warm (its status.availableReplicas)


@dataclass(frozen=True, eq=False)
class GpuReadings:
    identity: tuple[GpuIdentity, ...]
    values: Mapping[str, np.ndarray]
    errors: tuple[tuple[str, str], ...] = ()
    unsupported: tuple[tuple[str, str], ...] = ()
    workloads: tuple[WorkloadInfo, ...] = ()
    instances: tuple[InstanceReading, ...] = ()   # MIG: per GPU instance (the GPU's own value stays in `values`)
    services: Mapping[str, ServiceReading] = field(default_factory=lambda: MappingProxyType({}))


class Backend(Protocol):
    def read(self) -> GpuReadings: ...
