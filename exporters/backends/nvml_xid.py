"""XIDs through NVML events: `XidEvents(nvml, handles, uuids, uuid_of)`, the last XID of each GPU.

One event set (``nvmlEventSetCreate``) with every GPU registered for ``nvmlEventTypeXidCriticalError``;
`drain()` takes what is queued without waiting (``nvmlEventSetWait`` with a 0 ms timeout) and `values()` answers the
last XID per GPU: 0 until one arrives, as dcgm-exporter reports it. An event's GPU is the handle it carries, matched
against the handles held (`handle_key`) without asking NVML: a GPU in recovery raises XIDs while its calls hang, and
``nvmlDeviceGetUUID`` on it hung the collection's thread (the drain runs there, under the backend's lock); only a
handle not matched is named by ``uuid_of``.

A GPU whose XIDs cannot be heard has no XID value (NaN), never 0: 0 says "no XID since the exporter started", and a
GPU that cannot report one has not said that (dcgm-exporter, whose host engine cannot watch the field there, emits
no series either, and the controller keeps a GPU without the XID series the rest of the fleet has from new work).
Registration answering NotSupported (a platform without XID events, e.g. some vGPU guests) is for good:
`unsupported` marks the GPU, and it is not asked again. Any other failure (the event set or the registration
refused) is asked again until it succeeds: by each of the GPU's reads, in its own job under the reads' deadline
(`register(k)`: a GPU slower than the deadline, whose read is late at every drain, was never registered again after
a refusal or a set made anew; the drain registering it from the collection's thread hung the collection once the GPU
hung), and by `drain()` for a GPU no read job tried since the last drain (nor late: its registration would hang the
collection too), each in its GPU's own job until the reads' deadline too (`in_jobs`: a set made anew registers every
GPU read in time from the drain, and one that hung there hung the collection; the backend gives the drain's
registrations, a rebuild's included, what is left of the reads' deadline, not a fresh one each). A set is never
freed while a registration on it is in flight: the registration's job frees it once it returns. Only a Timeout from
``nvmlEventSetWait`` means nothing is queued: any other error (NVML uninitialised under the exporter, the driver
unloaded or reloaded) means the set hears nothing, so every GPU on it is unheard (NaN) from then, the set is freed,
and the next `drain()` creates and registers a new one. Taken for "nothing queued", such an error left every GPU
reading its last XID (0: healthy) while none could be heard. GpuIsLost from the wait is one GPU on the set fallen
off the bus, not the set deaf: the set is made anew in the same `drain()` (the lost GPU's registration refused,
retried at later drains; what was queued on the old set is dropped with it) and waited on again, so the healthy GPUs
keep their XID (it blanked every GPU's for that scrape). A new set answering GpuIsLost too is deaf as above.
A GPU fallen off the bus (`lost`) reads 79 whatever it could hear, until its next read that finds it (`found`): then
the last XID heard again (79 if NVML delivered that event too); kept at 79, a GPU that came back read "fallen off
the bus" until the exporter restarted. A backend that initialises NVML again makes a new
`XidEvents` with the handles of that initialisation and hands it the `last` XID of each GPU still served, by UUID
(they were heard; 0 for a GPU served from then).

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import contextlib
import ctypes
import logging
import threading
from collections.abc import Callable, Collection, Sequence
from typing import Any

import numpy as np

log = logging.getLogger(__name__)
FALLEN_OFF_THE_BUS = 79


def handle_key(h: Any) -> Any:
    """What tells two handles of one GPU alike: the address a ctypes pointer holds (pynvml's ``c_nvmlDevice_t``:
    an event's handle is another object than the one ``nvmlDeviceGetHandleByIndex`` gave), else the handle itself
    where it can be hashed, else the object. Only a ctypes pointer is read for an address: ctypes casts a string to
    a temporary buffer's, which two strings may share."""
    if isinstance(h, (ctypes._Pointer, ctypes.c_void_p)):
        return ("address", ctypes.cast(h, ctypes.c_void_p).value)
    try:
        hash(h)
    except TypeError:
        return ("object", id(h))
    return ("handle", h)


class XidEvents:
    """The last XID of each GPU of `handles` (named `uuids`, in the same order; `uuid_of` names the GPU an event's
    handle is); see the module docstring."""

    def __init__(self, nvml: Any, handles: Sequence[Any], uuids: Sequence[str],
                 uuid_of: Callable[[Any], str], *, last: Sequence[float] | None = None) -> None:
        self.nvml, self.handles, self._uuid_of = nvml, list(handles), uuid_of
        self._index = {u: k for k, u in enumerate(uuids)}
        self._by_handle = {handle_key(h): k for k, h in enumerate(self.handles)}
        n = len(self.handles)
        self.last = np.zeros(n) if last is None else np.array(last, dtype=float)
        self.listening = np.zeros(n, dtype=bool)
        self.unsupported = np.zeros(n, dtype=bool)
        self._lost = np.zeros(n, dtype=bool)
        self._said: set[int] = set()   # GPUs whose failure to register was logged
        self._deaf_said = False   # the event set's failure was logged (until it hears again)
        self._set: Any = None
        self._skip: frozenset[int] = frozenset()   # GPUs not to register this drain (their reads stuck in NVML)
        self._mu = threading.Lock()   # `_set`, `_registering`, `_tried` between read jobs and the drain: no NVML call
        self._registering: dict[int, Any] = {}   # GPU -> the set its read job is registering it on, in flight
        self._tried: set[int] = set()   # GPUs whose read job asked for their registration since the last drain
        # how the drain registers GPUs: each `register(k)` in the GPU's own job under the reads' deadline (the
        # backend's `GpuReads.call`); None (at construction, before any read): in this thread
        self.in_jobs: Callable[[Sequence[int]], None] | None = None
        self._listen()

    def _listen(self) -> None:
        nvml = self.nvml
        if self._set is None:
            try:
                self._set = nvml.nvmlEventSetCreate()
            except nvml.NVMLError as exc:
                self._refused(range(len(self.handles)), exc)
                return
        gpus = []
        for k in np.flatnonzero(~self.listening & ~self.unsupported).tolist():
            with self._mu:
                if k not in self._skip and k not in self._registering and k not in self._tried:
                    gpus.append(k)
        if self.in_jobs is not None:   # one that hangs leaves its GPU stuck, not the collection hung
            self.in_jobs(gpus)
            return
        for k in gpus:
            try:
                nvml.nvmlDeviceRegisterEvents(self.handles[k], nvml.nvmlEventTypeXidCriticalError, self._set)
            except nvml.NVMLError as exc:
                self._refused((k,), exc)
                continue
            self.listening[k] = True

    def _refused(self, gpus: Sequence[int] | range, exc: Exception) -> None:
        not_supported = isinstance(exc, self.nvml.NVMLError_NotSupported)
        for k in gpus:
            if not_supported:
                self.unsupported[k] = True
            if k not in self._said:
                self._said.add(k)
                log.warning("XID events unavailable on GPU %d (%s: %s): no XID series for it%s", k,
                            type(exc).__name__, exc, "" if not_supported else " until they are")

    def _deaf(self, exc: Exception) -> None:
        """The event set failed (`exc`, not a Timeout): no GPU is heard until a new set is registered."""
        if not self._deaf_said:
            self._deaf_said = True
            log.warning("waiting for XID events failed (%s: %s): no XID series until they are heard again",
                        type(exc).__name__, exc)
        self._drop()

    def _rebuild(self) -> bool:
        """A GPU on the set fell off the bus (the wait said GpuIsLost): a new set without it; whether one is made."""
        log.warning("a GPU on the XID event set fell off the bus: the set is made anew (events queued on it are lost)")
        self._drop()
        self._listen()
        return self._set is not None

    def _drop(self) -> None:
        with self._mu:
            self.listening[:] = False
            dropped, self._set = self._set, None
            if any(s is dropped for s in self._registering.values()):
                return   # freed by the registration in flight on it, once it returns (`register`)
        self._free(dropped)

    def _free(self, dropped: Any) -> None:
        with contextlib.suppress(self.nvml.NVMLError, AttributeError):   # a set NVML no longer knows: nothing to free
            self.nvml.nvmlEventSetFree(dropped)

    def register(self, k: int) -> None:
        """Register GPU `k` on the event set if it is not listening (nor unsupported): from the GPU's own read job,
        under the reads' deadline, so a registration that hangs (a GPU in recovery) leaves that GPU late, not the
        collection hung (module docstring)."""
        nvml = self.nvml
        with self._mu:
            events = self._set
            if events is None or self.listening[k] or self.unsupported[k] or k in self._registering:
                return   # no set: the drain makes one, and registers the GPUs then
            self._tried.add(k)
            self._registering[k] = events
        refused: Exception | None = None
        try:
            nvml.nvmlDeviceRegisterEvents(self.handles[k], nvml.nvmlEventTypeXidCriticalError, events)
        except nvml.NVMLError as exc:
            refused = exc
        with self._mu:
            del self._registering[k]
            current = events is self._set
            if current and refused is None:
                self.listening[k] = True
            orphan = not current and not any(s is events for s in self._registering.values())
        if orphan:   # dropped while this registration was in flight: its last user frees it
            self._free(events)
        elif refused is not None:
            self._refused((k,), refused)

    def lost(self, k: int) -> None:
        """GPU `k` fell off the bus (NVML said GpuIsLost): its XID is 79 until it is `found`."""
        self._lost[k] = True

    def found(self, k: int) -> None:
        """GPU `k` was read without GpuIsLost: if it was lost, its XID is the last one heard again."""
        if self._lost[k]:
            self._lost[k] = False
            log.warning("GPU %d answers again after it fell off the bus: its XID is the last one heard", k)

    def values(self) -> np.ndarray:
        """The last XID per GPU; NaN where none can be heard (`unsupported` tells whether for good)."""
        return np.where(self._lost, FALLEN_OFF_THE_BUS, np.where(self.listening, self.last, np.nan))

    def drain(self, skip: Collection[int] = ()) -> None:
        """Register the GPUs not listening yet (unless unsupported, tried by their read job since the last drain, or
        in `skip`: GPUs whose read is stuck in NVML, where a registration would hang the collection too; their read
        job registers them), then take every queued XID event."""
        nvml = self.nvml
        with self._mu:
            self._skip = frozenset(skip)
        if not (self.listening | self.unsupported).all():
            self._listen()
        with self._mu:
            self._tried.clear()
        if self._set is None:
            return
        rebuilt = False
        for _ in range(1024):
            try:
                data = nvml.nvmlEventSetWait(self._set, 0)
            except nvml.NVMLError_Timeout:   # nothing queued
                self._deaf_said = False
                return
            except nvml.NVMLError_GpuIsLost as exc:   # one GPU on the set, not the set (module docstring)
                if rebuilt:   # the new set too: deaf
                    self._deaf(exc)
                    return
                rebuilt = True
                if not self._rebuild():
                    return
                continue
            except nvml.NVMLError as exc:   # the set hears nothing (module docstring)
                self._deaf(exc)
                return
            k = self._by_handle.get(handle_key(data.device))
            if k is None:   # a handle not held (another object for it): named by NVML
                try:
                    k = self._index.get(self._uuid_of(data.device))
                except nvml.NVMLError:
                    continue
            if k is not None:
                self.last[k] = float(data.eventData)
