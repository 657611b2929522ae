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
`TargetUnavailable` (no limit of this initialisation can be trusted), ``apply_power_caps`` refuses every GPU whose
call failed with it. The handles are one initialisation's: the backend builds this anew
with the new ones when NVML is initialised again, which only its `read()` and `power_limits()` do (one attempt
each, the agent's once per sync; `TargetUnavailable` while it fails). Its ``apply_power_caps`` refuses every GPU
while NVML does not answer, and after NVML was initialised again since its last ``power_limits()`` (by a collection
of the same process): the caps were judged on limits read through the old handles. A GPU the backend names *stuck*
(its read has not returned from NVML) is not asked at all: its limit reads NaN, its cap is refused (`STUCK`) and
asked again at the next sync, since the call would hang too, under the lock every collection needs. Each GPU's
calls run in a thread of their own, waited for as a collection waits for its reads (`run`: the backend's
`GpuReads.run`): a call that does not return in time (the agent the first to find a GPU in recovery) leaves that GPU
stuck as a late read does, its limit NaN or its cap refused (`LATE`), and the agent, with the backend's lock, goes
on; it held the lock for good, and every collection failed behind it.

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Collection, Mapping
from typing import Any

from exporters.backends.nvml_init import NvmlInit
from exporters.power_caps import PowerCapError, PowerLimit, TargetUnavailable

log = logging.getLogger(__name__)
STUCK = "its read is stuck inside NVML (a GPU in recovery?): not asked, set at a later sync once it returns"
LATE = "its NVML call has not returned in time (a GPU in recovery?): set at a later sync once it returns"
# `GpuReads.run` with its `call` named: each job in a thread of its own, those done in time by key (`.result` or
# `.error`), a job still running left to run on (its GPU then stuck) rather than waited for
Run = Callable[[Mapping[str, Callable[[], Any]]], Mapping[str, Any]]


class NvmlPowerCaps:
    """`init`: the backend's `NvmlInit` (its `gone` errors, `lost` and `why`)."""

    def __init__(self, nvml: Any, handles: Mapping[str, Any], init: NvmlInit) -> None:
        self.nvml, self.init = nvml, init
        self.handles = dict(handles)
        self.gone = init.gone

    def apply_power_caps(self, caps: Mapping[str, float], *, run: Run, stuck: Collection[str] = ()) -> dict[str, float]:
        """`stuck`: GPUs whose read is stuck inside NVML, refused without a call (it would hang too); `run`: how the
        GPUs' calls are made and waited for (module docstring)."""
        jobs: dict[str, Callable[[], float]] = {}
        refused: dict[str, str] = {}
        for uuid, watts in caps.items():
            h = self.handles.get(uuid)
            if h is None:
                log.warning("power cap for unknown GPU %s ignored", uuid)
            elif uuid in stuck:
                refused[uuid] = STUCK
            else:
                jobs[uuid] = lambda h=h, watts=watts: self._set(h, watts)
        applied: dict[str, float] = {}
        for uuid, call in self._calls(run, jobs).items():
            if call is None:
                refused[uuid] = LATE
            elif call.error is None:
                applied[uuid] = call.result
            else:
                refused[uuid] = f"{type(call.error).__name__}: {call.error}"
                log.warning("could not set the power limit of %s: %s", uuid, refused[uuid])
        if refused:
            raise PowerCapError(applied, refused)
        return applied

    def _set(self, h: Any, watts: float) -> float:
        nvml = self.nvml
        lo, hi = nvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
        top = min(nvml.nvmlDeviceGetPowerManagementDefaultLimit(h), hi)
        mw = int(max(min(float(watts) * 1000.0, top), min(lo, top)))
        nvml.nvmlDeviceSetPowerManagementLimit(h, mw)
        return mw / 1000.0

    def power_limits(self, *, run: Run, stuck: Collection[str] = ()) -> dict[str, PowerLimit]:
        """`stuck`: GPUs whose read is stuck inside NVML, NaN (unread) without a call; a GPU whose call does not
        return in time is NaN too."""
        jobs = {uuid: (lambda h=h: self._limit(h)) for uuid, h in self.handles.items() if uuid not in stuck}
        calls = self._calls(run, jobs)
        if self.init.down is not None:
            raise TargetUnavailable(self.init.why()) from self.init.down
        for call in calls.values():
            if call is not None and call.error is not None:
                raise call.error   # a fault of this module's
        return {uuid: PowerLimit(math.nan, math.nan) if calls.get(uuid) is None else calls[uuid].result
                for uuid in self.handles}

    def _calls(self, run: Run, jobs: Mapping[str, Callable[[], Any]]) -> dict[str, Any]:
        """Each job's call through `run`, by GPU: None where it has not returned in time; NVML stopping
        (`gone`) told to `init.lost`; an error that is not NVML's raised."""
        done = run(jobs)
        calls = {uuid: done.get(uuid) for uuid in jobs}
        for call in calls.values():
            if call is None or call.error is None:
                continue
            if isinstance(call.error, self.gone):
                self.init.lost(call.error)
            elif not isinstance(call.error, self.nvml.NVMLError):
                raise call.error
        return calls

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
