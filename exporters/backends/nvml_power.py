"""Power limits through NVML for the power-cap agent: `NvmlPowerCaps(nvml, {uuid: handle})`.

``apply_power_caps({uuid: watts})`` sets ``nvmlDeviceSetPowerManagementLimit`` (milliwatts) clamped to
[``nvmlDeviceGetPowerManagementLimitConstraints``' minimum, ``nvmlDeviceGetPowerManagementDefaultLimit``], never
the constraints' maximum: on boards whose maximum exceeds their default (many PCIe and workstation boards) or
whose default is below the catalogue's TDP, a give-back written as the TDP must not raise the GPU above the limit
it boots with. A request at or above the default (`exporters.power_caps.RESTORE`: infinity) sets exactly the
default. Every GPU asked for is tried; those NVML refuses (NoPermission without root or CAP_SYS_ADMIN, a lost GPU)
raise one `PowerCapError` at the end, holding the ones it set. ``power_limits()`` answers each GPU's current
management limit (what ``nvidia-smi -pl`` sets), default and minimum, NaN where NVML will not say: the agent gives
a GPU back only while it runs at the cap gputide set, as clamped here.

NVML itself stopping (`exporters.backends.nvml_init`: uninitialised, the driver unloaded or reloaded) is no one
GPU's refusal: told to the backend's `NvmlInit.lost`, it ends the call. ``power_limits()`` then raises
`TargetUnavailable` (no limit of this initialisation can be trusted), ``apply_power_caps`` refuses the GPU it was
at and every one after it without asking NVML. The handles are one initialisation's: the backend builds this anew
with the new ones when NVML is initialised again, which only its `read()` and `power_limits()` do (one attempt
each, the agent's once per sync; `TargetUnavailable` while it fails). Its ``apply_power_caps`` refuses every GPU
while NVML does not answer, and after NVML was initialised again since its last ``power_limits()`` (by a collection
of the same process): the caps were judged on limits read through the old handles. A GPU the backend names *stuck*
(its read has not returned from NVML) is not asked at all: its limit reads NaN, its cap is refused (`STUCK`) and
asked again at the next sync, since the call would hang too, under the lock every collection needs.

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping
from typing import Any

from exporters.backends.nvml_init import NvmlInit
from exporters.power_caps import PowerCapError, PowerLimit, TargetUnavailable

log = logging.getLogger(__name__)
STUCK = "its read is stuck inside NVML (a GPU in recovery?): not asked, set at a later sync once it returns"


class NvmlPowerCaps:
    """`init`: the backend's `NvmlInit` (its `gone` errors, `lost` and `why`)."""

    def __init__(self, nvml: Any, handles: Mapping[str, Any], init: NvmlInit) -> None:
        self.nvml, self.init = nvml, init
        self.handles = dict(handles)
        self.gone = init.gone

    def apply_power_caps(self, caps: Mapping[str, float], stuck: Collection[str] = ()) -> dict[str, float]:
        """`stuck`: GPUs whose read is stuck inside NVML, refused without a call (it would hang too)."""
        nvml = self.nvml
        applied: dict[str, float] = {}
        refused: dict[str, str] = {}
        for uuid, watts in caps.items():
            h = self.handles.get(uuid)
            if h is None:
                log.warning("power cap for unknown GPU %s ignored", uuid)
                continue
            if self.init.down is not None:   # NVML stopped at an earlier GPU
                refused[uuid] = self.init.why()
                continue
            if uuid in stuck:
                refused[uuid] = STUCK
                continue
            try:
                lo, hi = nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
                top = min(nvml.nvmlDeviceGetPowerManagementDefaultLimit(h), hi)
                mw = int(max(min(float(watts) * 1000.0, top), min(lo, top)))
                nvml.nvmlDeviceSetPowerManagementLimit(h, mw)
                applied[uuid] = mw / 1000.0
            except nvml.NVMLError as exc:
                if isinstance(exc, self.gone):
                    self.init.lost(exc)
                refused[uuid] = f"{type(exc).__name__}: {exc}"
                log.warning("could not set the power limit of %s: %s", uuid, refused[uuid])
        if refused:
            raise PowerCapError(applied, refused)
        return applied

    def power_limits(self, stuck: Collection[str] = ()) -> dict[str, PowerLimit]:
        """`stuck`: GPUs whose read is stuck inside NVML, NaN (unread) without a call."""
        try:
            return {uuid: PowerLimit(math.nan, math.nan) if uuid in stuck else self._limit(h)
                    for uuid, h in self.handles.items()}
        except self.gone as exc:
            self.init.lost(exc)
            raise TargetUnavailable(self.init.why()) from exc

    def _limit(self, h: Any) -> PowerLimit:
        nvml = self.nvml
        try:
            limit = PowerLimit(nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
                               nvml.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0)
        except self.gone:
            raise
        except nvml.NVMLError:
            return PowerLimit(math.nan, math.nan)
        try:
            return limit._replace(min_w=nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)[0] / 1000.0)
        except self.gone:
            raise
        except nvml.NVMLError:
            return limit
