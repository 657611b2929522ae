"""Power limits through NVML for the power-cap agent: `NvmlPowerCaps(nvml, {uuid: handle})`.

``apply_power_caps({uuid: watts})`` sets ``nvmlDeviceSetPowerManagementLimit`` (milliwatts) clamped to
[``nvmlDeviceGetPowerManagementLimitConstraints``' minimum, ``nvmlDeviceGetPowerManagementDefaultLimit``], never
the constraints' maximum: on boards whose maximum exceeds their default (many PCIe and workstation boards) or
whose default is below the catalogue's TDP, a give-back written as the TDP must not raise the GPU above the limit
it boots with. A request at or above the default (`exporters.power_caps.RESTORE`: infinity) sets exactly the
default. Every GPU asked for is tried; those NVML refuses (NoPermission without root or CAP_SYS_ADMIN, a lost GPU)
raise one `PowerCapError` at the end, holding the ones it set. ``power_limits()`` answers each GPU's current
management limit (what ``nvidia-smi -pl`` sets), default and minimum, NaN where NVML will not say: the agent gives
a GPU back only while it runs at the cap gputide set, as clamped here. A GPU's default limit and allowed range are
constants of the board, asked once under this initialisation (by the first ``power_limits()`` or Set: `_constant`):
a limit read asks NVML for the current limit alone, a Set for it and the Set (before: three calls and four, each
under the reads' deadline on a slow GPU); NVML initialised again builds this anew, and asks them again. A board
that answers NotSupported for one has none: remembered as such (its minimum reads NaN, its default NaN with its
limit, a Set on it refused, `RememberedNotSupported`), not asked at every read, for `NOT_SUPPORTED_TTL_S` at most:
a GPU in recovery (an XID, a reset: NVML is not initialised again) may answer it for a while, and kept for the whole
initialisation it read NaN (every sync failed, a cap never given back) and refused every Set until the agent
restarted. Asked again: a transient error (a timeout, Unknown, a lost GPU), and an answer no board gives (a default
at or below 0, a range whose minimum is at or below 0 or above its maximum), used for that call as it is, rather than
kept until NVML is initialised again.

NVML itself stopping (`exporters.backends.nvml_init`: uninitialised, the driver unloaded or reloaded) is no one
GPU's refusal: told to the backend's `NvmlInit.lost`, it ends the call. ``power_limits()`` then raises
`TargetUnavailable` (no limit of this initialisation can be trusted), ``apply_power_caps`` refuses every GPU whose
call failed with it. The handles are one initialisation's: the backend builds this anew
with the new ones when NVML is initialised again, which only its `read()` and `power_limits()` do (one attempt
each, the agent's once per sync; `TargetUnavailable` while it fails). Its ``apply_power_caps`` refuses every GPU
while NVML does not answer, and after NVML was initialised again since its last ``power_limits()`` (by a collection
of the same process): the caps were judged on limits read through the old handles. A GPU the backend names *stuck*
(its read, or an earlier call, has not returned from NVML) is not asked at all: its limit reads NaN (the agent
then waits, `exporters.power_caps`), a cap asked all the same is refused (`STUCK`) and asked again at the next
sync: the GPU gets no other job while one is inside NVML (`GpuReads`).

Each GPU's calls run in that GPU's own job, with the reads' deadline (`call`: the backend's `GpuReads.call`): the
agent the first to call a GPU in recovery leaves that GPU stuck, as a late read does, and goes on, freeing the
backend's lock (it held it for good, and every collection failed behind it). A limit read that does not return in
time is NaN. A Set that does not return in time is neither done nor refused: NVML may still set it when the call
returns. It is refused `LATE` and named *pending* (`PowerCapError.pending`), for the agent to judge from what the
Set returned (`returned_sets`: the watts set, or its refusal: then it did not take, whatever the limit reads; kept
across a re-initialisation, `late_sets`), or where it cannot say (an agent restarted meanwhile) from the limit the
GPU reads (`exporters.power_caps`). A limit read that did not return in time is used at the next `power_limits` once
it has returned (a GPU slower than the deadline is read one sync late, not never), unless a Set was made since.

Each Set is a compare-and-set: in the GPU's job, right before it, the limit is read again, and a GPU no longer at the
limit the last `power_limits` answered for it (the one the agent decided on) is not Set (`Moved`, refused: judged
again at the next sync). A late limit read may have sampled the limit before an operator's ``nvidia-smi -pl 250``:
a give-back judged on it raised 250 W to the default, a first cap kept the default as the limit before.
NVML stopping is told by any GPU's call failing with it. A GPU whose limit that read finds already at the milliwatts
the Set would write is not Set: counted set (applied, as NVML would have answered it). Asked all the same, a Set
refused NoPermission or NotSupported (a container without CAP_SYS_ADMIN on a node already at that limit: an operator's
``nvidia-smi -pl`` at the watts asked) failed every sync for good, for a limit already in force.

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Collection, Mapping
from typing import Any

from exporters.backends.nvml_init import NvmlInit
from exporters.power_caps import TOLERANCE_W, PowerCapError, PowerLimit, TargetUnavailable

log = logging.getLogger(__name__)
STUCK = ("its read or an earlier call is stuck inside NVML (a GPU in recovery?): not asked, set at a later sync "
         "once it returns")
LATE = ("its power-limit Set has not returned in time (a GPU in recovery?): pending, judged from what it returns "
        "once it does")
NOT_SUPPORTED_TTL_S = 600.0   # how long a NotSupported default limit or range is remembered before it is asked again


class Moved(Exception):
    """A Set not made: the GPU's limit is no longer the one the agent's decision used (`NvmlPowerCaps._set`)."""


class RememberedNotSupported(Exception):
    """NVML's NotSupported for a GPU's default limit or range, raised again from memory (`NvmlPowerCaps._constant`)
    rather than from a call: not NVML's own error, so a refusal says how old the answer is and when it is asked
    again."""


# `GpuReads.call` with what the calls are named: each job in its GPU's own job, by key (`.result` or `.error` once
# `.done`), one still running at its deadline (`.late`) left to run on (its GPU then stuck) rather than waited for
Call = Callable[[Mapping[str, Callable[[], Any]]], Mapping[str, Any]]


class NvmlPowerCaps:
    """`init`: the backend's `NvmlInit` (its `gone` errors, `lost` and `why`); `late_sets`: the pending Sets of the
    previous initialisation's `NvmlPowerCaps` (`returned_sets` still answers what they returned). `clock` is the
    monotonic clock a remembered NotSupported ages on: `time.monotonic`, as this module names it when built (tests
    replace the module's `time`; no caller passed another, so it is no parameter)."""

    def __init__(self, nvml: Any, handles: Mapping[str, Any], init: NvmlInit, *,
                 late_sets: Mapping[str, Any] | None = None) -> None:
        self.nvml, self.init = nvml, init
        self.handles = dict(handles)
        self.gone = init.gone
        self._late_limits: dict[str, Any] = {}   # limit reads past their deadline: used once returned, if young
        self._late_sets: dict[str, Any] = dict(late_sets or {})   # Sets past their deadline (pending): outcomes
        self._used: dict[str, float] = {}   # the limit each GPU read at the last `power_limits`: the agent's decision's
        self._constants: dict[tuple[str, str], Any] = {}   # (GPU, NVML function) -> its answer: `_constant`
        self._not_supported: dict[tuple[str, str], float] = {}   # (GPU, NVML function) -> when it said NotSupported
        self.clock: Callable[[], float] = time.monotonic

    def apply_power_caps(self, caps: Mapping[str, float], *, call: Call,
                         stuck: Collection[str] = ()) -> dict[str, float]:
        """`stuck`: GPUs whose read or call is stuck inside NVML, refused without a call (it would hang too);
        `call`: how the GPUs' Sets are made and waited for (module docstring)."""
        jobs: dict[str, Callable[[], float]] = {}
        refused: dict[str, str] = {}
        for uuid, watts in caps.items():
            h = self.handles.get(uuid)
            if h is None:
                log.warning("power cap for unknown GPU %s ignored", uuid)
            elif uuid in stuck:
                refused[uuid] = STUCK
            else:
                was = self._used.get(uuid, math.nan)
                jobs[uuid] = lambda uuid=uuid, h=h, watts=watts, was=was: self._set(uuid, h, watts, was)
        applied: dict[str, float] = {}
        for uuid in jobs:   # a limit read before this Set is no longer the GPU's limit
            self._late_limits.pop(uuid, None)
            self._used.pop(uuid, None)
        done, late = self._calls(call, jobs)
        self._late_sets.update(late)
        refused.update({uuid: STUCK for uuid in jobs if uuid not in done and uuid not in late})   # a call in flight
        pending = list(late)
        refused.update(dict.fromkeys(pending, LATE))
        for uuid, set_call in done.items():
            if set_call.error is None:
                applied[uuid] = set_call.result
            else:
                refused[uuid] = f"{type(set_call.error).__name__}: {set_call.error}"
                log.warning("could not set the power limit of %s: %s", uuid, refused[uuid])
        if refused:
            raise PowerCapError(applied, refused, pending)
        return applied

    def _set(self, uuid: str, h: Any, watts: float, was: float) -> float:
        """Set `watts` (clamped) only while the GPU's limit is still `was`, the one the agent decided on (NaN: none
        read; the agent asks no Set on a GPU whose limit is unread, `PowerCapAgent._request`), re-read in this job
        right before: a limit changed since (an operator's ``nvidia-smi -pl`` while a
        late read that sampled the old one was inside NVML) is refused (`Moved`), not overwritten. A limit that
        re-read finds at the very milliwatts to set is not Set again: in force already, done (a driver that refuses
        the Set, for good, refused a limit it had)."""
        nvml = self.nvml
        now_mw = math.nan if math.isnan(was) else nvml.nvmlDeviceGetPowerManagementLimit(h)
        if abs(now_mw / 1000.0 - was) > TOLERANCE_W:   # NaN: not re-read
            raise Moved(f"its limit is {now_mw / 1000.0:.0f} W, not the {was:.0f} W it read (changed since, by "
                        "hand?): not set, judged again at the next sync")
        lo, hi = self._constant(uuid, "nvmlDeviceGetPowerManagementLimitConstraints", h)
        top = min(self._constant(uuid, "nvmlDeviceGetPowerManagementDefaultLimit", h), hi)
        mw = int(max(min(float(watts) * 1000.0, top), min(lo, top)))
        if now_mw != mw:   # NVML's limits are whole milliwatts: equal, it is the limit in force
            nvml.nvmlDeviceSetPowerManagementLimit(h, mw)
        return mw / 1000.0

    def power_limits(self, *, call: Call, stuck: Collection[str] = (),
                     young: Callable[[Any], bool] = lambda read: True) -> dict[str, PowerLimit]:
        """`stuck`: GPUs whose read or call is stuck inside NVML, NaN (unread) without a call; a GPU whose call does
        not return in time is NaN too, and its limit read, once it has returned, is this GPU's limit at the next
        `power_limits` if `young` (and no Set made since), not read again: a GPU answering, but slower than the
        deadline, was never read in time, so never capped nor given back."""
        returned = {}
        for uuid, read in list(self._late_limits.items()):
            if read.done.is_set():
                del self._late_limits[uuid]
                if read.error is None and young(read):
                    returned[uuid] = read
        done, late = self._calls(call, {uuid: (lambda uuid=uuid, h=h: self._limit(uuid, h))
                                        for uuid, h in self.handles.items()
                                        if uuid not in stuck and uuid not in returned})
        self._late_limits.update(late)
        if self.init.down is not None:
            raise TargetUnavailable(self.init.why()) from self.init.down
        done.update(returned)
        unread = PowerLimit(math.nan, math.nan)
        limits = {uuid: done[uuid].result if uuid in done and done[uuid].error is None else unread
                  for uuid in self.handles}
        self._used = {uuid: limit.current_w for uuid, limit in limits.items()}
        return limits

    def returned_sets(self) -> dict[str, float | str]:
        """The Sets that had not returned in time (pending) and have since: the watts set, or why it was refused
        (then it did not take); taken once."""
        out: dict[str, float | str] = {}
        for uuid, read in list(self._late_sets.items()):
            if read.done.is_set():
                del self._late_sets[uuid]
                out[uuid] = read.result if read.error is None else f"{type(read.error).__name__}: {read.error}"
        return out

    def late_sets(self) -> dict[str, Any]:
        """The pending Sets, returned or not, for the `NvmlPowerCaps` of the next initialisation (`late_sets=`)."""
        return dict(self._late_sets)

    def _calls(self, call: Call, jobs: Mapping[str, Callable[[], Any]]) -> tuple[dict[str, Any], dict[str, Any]]:
        """Each job's call through `call` that returned in time, by GPU, and those that did not (`late`); NVML
        stopping (`gone`) told to `init.lost`; an error that is not NVML's raised."""
        ran = dict(call(jobs))
        done = {uuid: one for uuid, one in ran.items() if not one.late}
        for one in done.values():
            if one.error is None:
                continue
            if isinstance(one.error, self.gone):
                self.init.lost(one.error)
            elif not isinstance(one.error, self.nvml.NVMLError | Moved | RememberedNotSupported):
                raise one.error
        return done, {uuid: one for uuid, one in ran.items() if one.late}

    def _limit(self, uuid: str, h: Any) -> PowerLimit:
        nvml = self.nvml
        try:
            limit = PowerLimit(nvml.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
                               self._constant(uuid, "nvmlDeviceGetPowerManagementDefaultLimit", h) / 1000.0)
        except self.gone:
            raise
        except (nvml.NVMLError, RememberedNotSupported):
            return PowerLimit(math.nan, math.nan)
        try:
            return limit._replace(min_w=self._constant(uuid, "nvmlDeviceGetPowerManagementLimitConstraints", h)[0]
                                  / 1000.0)
        except self.gone:
            raise
        except (nvml.NVMLError, RememberedNotSupported):
            return limit

    def _constant(self, uuid: str, fn: str, h: Any) -> Any:
        """NVML's `fn` of GPU `uuid` (its default limit, its limit's allowed range: constants of the board) as
        first asked under this initialisation (the backend builds this object anew at each, so a reloaded driver's
        are asked again), by a limit read or a Set. Each asked both every time before: a Set four calls where two do,
        a limit read three where one does, on a slow GPU all of them under the reads' deadline. NotSupported is
        remembered too, and raised again without a call (`RememberedNotSupported`, saying how old): the board has
        none until NVML is initialised again, or the time-to-live `NOT_SUPPORTED_TTL_S` passes (a GPU in recovery
        may answer it for a while; asked at every read, such a GPU took two calls where one does). Any other error
        (a timeout, a lost GPU: it may pass) is not remembered, nor an answer no board gives (`_plausible`): kept,
        it refused every Set until a re-init."""
        key = (uuid, fn)
        said = self._not_supported.get(key)
        if said is not None:
            age = self.clock() - said
            if age < NOT_SUPPORTED_TTL_S:
                raise RememberedNotSupported(
                    f"NotSupported for its {_WHAT[fn]}, remembered from {age:.0f} s ago (not asked again for "
                    f"{NOT_SUPPORTED_TTL_S:.0f} s): not set, NVML asked again in {NOT_SUPPORTED_TTL_S - age:.0f} s")
            del self._not_supported[key]
        if key not in self._constants:
            try:
                value = getattr(self.nvml, fn)(h)
            except self.nvml.NVMLError_NotSupported:
                self._not_supported[key] = self.clock()
                raise
            if not _plausible(fn, value):
                return value
            self._constants[key] = value
        return self._constants[key]


_WHAT = {"nvmlDeviceGetPowerManagementDefaultLimit": "default limit",
         "nvmlDeviceGetPowerManagementLimitConstraints": "limit's allowed range"}


def _plausible(fn: str, value: Any) -> bool:
    """Whether NVML's answer for `fn` may be a board's: a default limit above 0 mW, an allowed range with its minimum
    above 0 and at most its maximum. Another is a glitch of that call, not the board's constant: used as it is for
    that call (the Set's clamp, the limit read, as every call did before the cache), asked again at the next."""
    if fn == "nvmlDeviceGetPowerManagementLimitConstraints":
        lo, hi = value
        return 0 < lo <= hi
    return value > 0
