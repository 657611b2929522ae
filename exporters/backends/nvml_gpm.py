"""SM activity from GPM (GPU Performance Monitoring, Hopper and newer): per GPU, and per GPU instance of a MIG GPU.

GPM answers a metric between two samples: `sm_util(nvml, prev, cur)` is ``NVML_GPM_METRIC_SM_UTIL`` / 100 between
them. `GpuActivity` reads it per GPU (``nvmlGpmSampleGet``), between each read's sample and the previous read's: a
GPU's first read has no value and no error; a GPU without GPM (before Hopper, ``nvmlGpmQueryDeviceSupport`` saying
no) or whose GPM answers NotSupported (a Hopper board in MIG mode, a VM without profiling) has it unsupported, and
GPM is not asked there again. `MigActivity` reads it per GPU instance of the GPUs in MIG mode (``nvmlGpmMigSampleGet``,
one sample per instance and scrape, each compared with the previous scrape's), which is what dcgm-exporter publishes as
``DCGM_FI_PROF_SM_ACTIVE{GPU_I_ID, GPU_I_PROFILE}`` for a MIG GPU: the instance's own SMs' activity. Without it a
MIG GPU has no SM activity from NVML at all: utilisation answers NotSupported in MIG mode. Before Hopper there is
no GPM, so an A100 or A30 in MIG mode gets per-instance activity from DCGM (dcgm-exporter) only.

The GPU instances are listed each scrape from the MIG devices under the GPU (``nvmlDeviceGetMigDeviceHandleByIndex``
up to ``nvmlDeviceGetMaxMigDeviceCount``; several compute instances of one GPU instance are one instance here), so
a re-partitioned GPU is followed; a sample of an instance gone is freed. Whether a GPU is in MIG mode is asked once:
the mode changes only with a GPU reset, which the driver refuses while this process holds the GPU.

Not verified on MIG hardware (none was available): written against NVML's documented calls and the in-repo fake.
This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import contextlib
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from exporters.backends.base import InstanceReading
from exporters.backends.nvml_mig import profile_of_name

log = logging.getLogger(__name__)
Fresh = Callable[[], None]   # raises in a read that outlived its NVML initialisation (`exporters.backends.nvml`)
UNSUPPORTED, ERROR = "unsupported", "error"   # why `GpuActivity.read` has no value ("": a first sample)


def _always_fresh() -> None:
    return None


def sm_util(nvml: Any, prev: Any, cur: Any) -> tuple[float | None, bool]:
    """(SM_UTIL / 100 between two GPM samples or None, whether GPM answered NotSupported for the metric)."""
    mg = nvml.c_nvmlGpmMetricsGet_t()
    mg.version = nvml.NVML_GPM_METRICS_GET_VERSION
    mg.numMetrics = 1
    mg.sample1, mg.sample2 = prev, cur
    mg.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
    nvml.nvmlGpmMetricsGet(mg)
    ret = mg.metrics[0].nvmlReturn
    if ret != nvml.NVML_SUCCESS:
        return None, ret == nvml.NVML_ERROR_NOT_SUPPORTED
    return float(mg.metrics[0].value) / 100.0, False


class GpuActivity:
    """`read(k, h)`: SM activity of GPU `k` of `handles` (named `uuids`) between this read's GPM sample and the
    previous one (module docstring). `gone`: the errors that say NVML itself stopped answering, raised to the caller,
    the sample dropped with the rest of that initialisation. `on[k]`: GPM used. `fresh()` is called after each call
    that can hang and before each free: it raises in a read that outlived its initialisation, whose samples NVML's
    shutdown may have freed already (a second free, or a metric of them, could crash the process)."""

    def __init__(self, nvml: Any, handles: Sequence[Any], uuids: Sequence[str],
                 gone: tuple[type[Exception], ...] = (), *, fresh: Fresh = _always_fresh) -> None:
        self.nvml, self.uuids, self.gone, self.fresh = nvml, uuids, gone, fresh
        self.on = [self._supported(h) for h in handles]
        self._prev: list[Any] = [None] * len(handles)

    def _supported(self, h: Any) -> bool:
        nvml = self.nvml
        try:
            return (nvml.nvmlDeviceGetArchitecture(h) >= nvml.NVML_DEVICE_ARCH_HOPPER
                    and bool(nvml.nvmlGpmQueryDeviceSupport(h).isSupportedDevice))
        except (nvml.NVMLError, AttributeError):
            return False

    def _free(self, sample: Any) -> None:
        self.fresh()
        with contextlib.suppress(self.nvml.NVMLError):
            self.nvml.nvmlGpmSampleFree(sample)

    def read(self, k: int, h: Any) -> tuple[float | None, str]:
        """(SM_UTIL / 100 or None, why none: `UNSUPPORTED`, `ERROR`, or "" on a first sample)."""
        nvml = self.nvml
        if not self.on[k]:
            return None, UNSUPPORTED
        try:
            sample = nvml.nvmlGpmSampleAlloc()
        except nvml.NVMLError:
            return None, ERROR
        try:
            cur = nvml.nvmlGpmSampleGet(h, sample)
        except nvml.NVMLError as exc:
            if isinstance(exc, self.gone):
                raise
            self._free(sample)
            return None, self._failed(k, isinstance(exc, nvml.NVMLError_NotSupported))
        self.fresh()
        prev, self._prev[k] = self._prev[k], cur
        if prev is None:
            return None, ""
        try:
            value, not_supported = sm_util(nvml, prev, cur)
        except nvml.NVMLError:
            value, not_supported = None, False
        finally:
            self._free(prev)
        return (value, "") if value is not None else (None, self._failed(k, not_supported))

    def _failed(self, k: int, not_supported: bool) -> str:
        if not not_supported:
            return ERROR
        log.info("GPM not supported on GPU %s: no SM activity", self.uuids[k])
        self.on[k] = False
        last, self._prev[k] = self._prev[k], None
        if last is not None:
            self._free(last)
        return UNSUPPORTED


class MigActivity:
    """`read()`: SM activity per GPU instance of the MIG-mode GPUs among `handles` whose `gpm` flag is set."""

    def __init__(self, nvml: Any, handles: Sequence[Any], gpm: Sequence[bool], *,
                 fresh: Fresh = _always_fresh) -> None:
        """`fresh`: as `GpuActivity`'s, called after each call that can hang and before each free."""
        self.nvml, self.handles, self.fresh = nvml, handles, fresh
        self.mig = [bool(ok) and self._mig_mode(h) for h, ok in zip(handles, gpm, strict=True)]
        self._prev: dict[tuple[int, int], Any] = {}

    def _mig_mode(self, h: Any) -> bool:
        nvml = self.nvml
        try:
            return nvml.nvmlDeviceGetMigMode(h)[0] == getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1)
        except (nvml.NVMLError, AttributeError):
            return False

    def _instances(self, h: Any) -> dict[int, str]:
        """GPU instance ID -> its profile ("" when NVML's name does not say), from the MIG devices under `h`."""
        nvml, found = self.nvml, {}
        for i in range(nvml.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                mig = nvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
                name = nvml.nvmlDeviceGetName(mig)
                gi = int(nvml.nvmlDeviceGetGpuInstanceId(mig))
            except nvml.NVMLError_GpuIsLost:
                raise
            except nvml.NVMLError:
                continue   # no MIG device at this index (NotFound), or one being destroyed
            found[gi] = profile_of_name(name)
        return found

    def _sample(self, k: int, h: Any, gi: int) -> float | None:
        nvml = self.nvml
        cur = nvml.nvmlGpmSampleAlloc()
        try:
            nvml.nvmlGpmMigSampleGet(h, gi, cur)
        except nvml.NVMLError:
            self._free(cur)
            raise
        self.fresh()
        prev, self._prev[k, gi] = self._prev.get((k, gi)), cur
        if prev is None:
            return None
        try:
            return sm_util(nvml, prev, cur)[0]
        finally:
            self._free(prev)

    def _free(self, sample: Any) -> None:
        self.fresh()
        self.nvml.nvmlGpmSampleFree(sample)

    def read(self) -> tuple[InstanceReading, ...]:
        """One reading per GPU instance that has two samples; an instance NVML fails for is left out this scrape,
        a GPU it fails for entirely (lost, not answering) too."""
        return tuple(r for k in range(len(self.handles)) for r in self.read_gpu(k))

    def read_gpu(self, k: int) -> list[InstanceReading]:
        """`read()` of GPU `k` alone (the backend reads each GPU in a thread of its own)."""
        nvml, h, out = self.nvml, self.handles[k], []
        if not self.mig[k]:
            return out
        try:
            instances = self._instances(h)
        except nvml.NVMLError:
            return out
        for gi in [g for kk, g in list(self._prev) if kk == k and g not in instances]:
            self._free(self._prev.pop((k, gi)))   # an instance destroyed since
        for gi, profile in sorted(instances.items()):
            try:
                value = self._sample(k, h, gi)
            except nvml.NVMLError as exc:
                log.debug("GPM sample of GPU %d instance %d failed: %s", k, gi, exc)
                continue
            if value is not None and math.isfinite(value):
                out.append(InstanceReading(k, str(gi), profile, value))
        return out
