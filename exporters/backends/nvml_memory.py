"""Framebuffer memory through NVML: ``nvmlDeviceGetMemoryInfo`` version 2 where the driver has it, else version 1.

Version 1 (``nvmlMemory_t``) counts the memory the driver and firmware reserve on the board as *used*: an idle
H200 read 615 MiB used where ``nvidia-smi`` said Used 0 MiB, Reserved 616 MiB (bench/device/h200-2026-12-04).
Version 2 (``nvmlMemory_v2_t``, driver R510 and newer) splits it off: ``used`` is what processes allocated,
``reserved`` the rest, ``free = total - reserved - used``, as nvidia-smi and dcgm-exporter's ``DCGM_FI_DEV_FB_USED``
/ ``DCGM_FI_DEV_FB_RESERVED`` report them. A driver or an nvidia-ml-py without version 2 (NotSupported,
FunctionNotFound, ArgumentVersionMismatch; an nvidia-ml-py without ``nvmlMemory_v2`` or the ``version`` argument)
gets version 1 for good on that GPU: its ``used`` includes the reservation and it has no reserved figure.

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import logging
from typing import Any

log = logging.getLogger(__name__)
# what NVML raises where version 2 of the call is missing (the driver's or the bindings')
V2_MISSING = ("NVMLError_NotSupported", "NVMLError_FunctionNotFound", "NVMLError_ArgumentVersionMismatch")


class NvmlMemory:
    """`read(k, h)`: GPU `k`'s memory info, version 2 until it proves missing there (`v1` holds those GPUs)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.v1: set[int] = set()
        self._missing = tuple(getattr(nvml, n) for n in V2_MISSING if hasattr(nvml, n))

    def read(self, k: int, h: Any) -> Any:
        """NVML's memory struct (bytes: ``total``, ``used``, ``free``; ``reserved`` unless `k` is in `v1`). Any
        error but version 2 missing propagates, and version 1's own errors too."""
        nvml = self.nvml
        version = getattr(nvml, "nvmlMemory_v2", None)
        if k not in self.v1 and version is not None:
            try:
                return nvml.nvmlDeviceGetMemoryInfo(h, version=version)
            except (*self._missing, TypeError) as exc:   # TypeError: bindings whose call takes no version
                log.info("nvmlDeviceGetMemoryInfo version 2 unavailable on GPU %d (%s): version 1, whose used "
                         "memory includes the reserved", k, type(exc).__name__)
                self.v1.add(k)
        return nvml.nvmlDeviceGetMemoryInfo(h)
