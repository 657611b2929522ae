"""Which GPUs the NVML backend serves, and their dcgm-exporter labels: `identify(nvml, hostname)`, at start and each
time NVML is initialised again (`exporters.backends.nvml_init`: the GPUs it names then are served).

Each GPU NVML counts is taken by its index (``nvmlDeviceGetHandleByIndex``) and named by its UUID. A GPU NVML cannot
name (fallen off the bus before the exporter started: ``NVMLError_GpuIsLost``, or any other ``NVMLError`` from the
handle or the UUID) is left out, logged, and its index stays its own: every other GPU is still served, with its
own index as ``gpu`` and ``device``. Without a UUID its series could not be told from another GPU's, and the
controller keys GPUs by UUID; a GPU lost like that stays lost until a reset or a reboot, which restarts the
exporter. A GPU that is named but then fails (its PCI bus ID or its model name unreadable: a GPU falling off the
bus between the calls) is served, with what could not be read left empty, and its reads mark it lost (XID 79).

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any, NamedTuple

from exporters.backends.base import GpuIdentity

log = logging.getLogger(__name__)


def text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


class Gpus(NamedTuple):
    handles: list[Any]               # the GPUs served, in `identity` order
    identity: tuple[GpuIdentity, ...]
    by_index: list[Any]              # every NVML index's handle, None for a GPU left out (MIG index lookups)


def identify(nvml: Any, hostname: str, driver_version: str = "") -> Gpus:
    handles: list[Any] = []
    ids: list[GpuIdentity] = []
    by_index: list[Any] = []
    for i in range(nvml.nvmlDeviceGetCount()):
        try:
            h = nvml.nvmlDeviceGetHandleByIndex(i)
            uuid = text(nvml.nvmlDeviceGetUUID(h))
        except nvml.NVMLError as exc:
            log.error("GPU %d left out: NVML cannot name it (%s: %s); the node's other GPUs are served", i,
                      type(exc).__name__, exc)
            by_index.append(None)
            continue
        by_index.append(h)
        handles.append(h)
        pci = _read(nvml, lambda h=h: nvml.nvmlDeviceGetPciInfo(h).busId)
        model = _read(nvml, lambda h=h: nvml.nvmlDeviceGetName(h))
        ids.append(GpuIdentity(gpu=str(i), uuid=uuid, pci_bus_id=pci,
                               device=f"nvidia{i}",   # dcgm-exporter's: the GPU's index, not its minor
                               model_name=model, hostname=hostname, driver_version=driver_version))
    return Gpus(handles, tuple(ids), by_index)


def _read(nvml: Any, fn: Callable[[], Any]) -> str:
    try:
        return text(fn())
    except nvml.NVMLError as exc:
        log.error("a GPU label unreadable (%s: %s): left empty", type(exc).__name__, exc)
        return ""
