"""Which MIG device a device plugin's ID names, asked of NVML: `NvmlMigLookup(nvml, handles)(device_id)`.

With MIG, NVIDIA's device plugin hands pods MIG devices, not GPUs: their IDs are MIG UUIDs (``MIG-<uuid>``,
drivers R470 and newer), whether the resource is ``nvidia.com/gpu`` (MIG strategy "single") or
``nvidia.com/mig-<profile>`` ("mixed"); with ``--device-id-strategy=index`` they are ``<gpu index>:<mig index>``.
Neither says which GPU the device is carved from. NVML does, as dcgm-exporter asks it: the MIG device's handle
(``nvmlDeviceGetHandleByUUID``, or ``nvmlDeviceGetMigDeviceHandleByIndex`` under its GPU), then its parent GPU
(``nvmlDeviceGetDeviceHandleFromMigDeviceHandle``), its GPU instance (``nvmlDeviceGetGpuInstanceId``) and its
name, whose last word is the profile (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``; a compute-instance profile such as
``1c.2g.20gb`` names the GPU instance's ``2g.20gb``, dcgm-exporter's ``GPU_I_PROFILE``).

A MIG UUID names one instance for its whole life (re-creating the instance gives it a new UUID), so what a UUID
resolved to is kept; an index is asked each time (re-partitioning reuses it). What NVML cannot resolve is None and
asked again at the next scrape. The formats that carry their GPU (R450/R460's ``MIG-GPU-<uuid>/<gi>/<ci>``, GKE's
``nvidia<n>/gi<gi>``) need no NVML: `exporters.podresources` reads them itself.

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from exporters.backends.base import MigInstance

_INDEX = re.compile(r"^(\d+):(\d+)$")
_COMPUTE_INSTANCE = re.compile(r"^\d+c\.")


def gpu_instance_profile(profile: str) -> str:
    """``1g.10gb`` from a MIG profile as NVML names a MIG device or the device plugin a resource (``1c.2g.20gb``
    is a compute instance of a ``2g.20gb`` GPU instance)."""
    return _COMPUTE_INSTANCE.sub("", profile.strip())


def profile_of_name(name: Any) -> str:
    """The GPU instance profile a MIG device's NVML name ends with (``NVIDIA A100-SXM4-80GB MIG 1g.10gb``), or ""."""
    name = _text(name)
    return gpu_instance_profile(name.rsplit(" MIG ", 1)[1]) if " MIG " in name else ""


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class NvmlMigLookup:
    """`MigLookup` over NVML (module docstring); `handles` are the backend's GPU handles in NVML index order (None
    for a GPU it left out)."""

    def __init__(self, nvml: Any, handles: Sequence[Any]) -> None:
        self.nvml, self.handles = nvml, handles
        self._by_uuid: dict[str, MigInstance] = {}

    def __call__(self, device_id: str) -> MigInstance | None:
        nvml = self.nvml
        if device_id in self._by_uuid:
            return self._by_uuid[device_id]
        index = _INDEX.match(device_id)
        try:
            if index:
                gpu, mig = int(index[1]), int(index[2])
                if gpu >= len(self.handles) or self.handles[gpu] is None:   # None: a GPU the backend left out
                    return None
                found = self._describe(nvml.nvmlDeviceGetMigDeviceHandleByIndex(self.handles[gpu], mig))
            elif device_id.startswith("MIG-"):
                found = self._by_uuid[device_id] = self._describe(nvml.nvmlDeviceGetHandleByUUID(device_id))
            else:
                return None
        except nvml.NVMLError:
            return None
        return found

    def _describe(self, mig: Any) -> MigInstance:
        nvml = self.nvml
        parent = nvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
        return MigInstance(parent_uuid=_text(nvml.nvmlDeviceGetUUID(parent)),
                           gpu_instance_id=int(nvml.nvmlDeviceGetGpuInstanceId(mig)),
                           profile=profile_of_name(nvml.nvmlDeviceGetName(mig)))
