"""NVML initialised again after it stops answering under a running exporter or power-cap agent:
`NvmlInit(nvml, hostname, driver_version)`, one per backend.

NVML can become unusable while the process runs: a user of the library in this process calls ``nvmlShutdown`` once
too often (every call then raises ``NVMLError_Uninitialized``), the kernel driver is unloaded
(``NVMLError_DriverNotLoaded``), or it is reloaded at another version than the libnvidia-ml this process loaded
(``NVMLError_LibRmVersionMismatch``). These are the library's errors, not a GPU's (`gone`): the backend stops its
read at the first one and calls `lost(exc)`; until NVML answers again every field of every GPU is an error, and no
power limit is read or set (`exporters.backends.nvml_power`).

At each read while NVML is down (the exporter's `read()`, the power-cap agent's `power_limits()`: one per sync) the
backend calls `restart(served)` once: ``nvmlShutdown`` where this process's reference still counts (not after
Uninitialized: there it no longer does, and a shutdown would take another user's), ``nvmlInit``, and every GPU
named again by its index and UUID (`exporters.backends.nvml_identity`), since a handle is valid for one
initialisation only and an index can move when a reload loses or finds a GPU. It answers the GPUs NVML names now,
labelled as at start (the host and driver version kept), or None while NVML is still unusable: logged (the first
time for each kind of error), counted in `failures`, tried again at the next read. NVML naming no GPU at all is
such a failure (a driver still coming up), and so is NVML naming none at start (`no_gpu`): the backend asks again at
every read, as it does while NVML is down, rather than serving no GPU until a restart (the exporter stays live, and
not ready while it reads nothing). The backend then serves what NVML names, as a restarted exporter would:
a served GPU NVML no longer names is gone (logged at ERROR; its series end) and a GPU not served before is served
from then (logged); `reinits` counts the re-initialisations that succeeded.

A version mismatch is not mended by ``nvmlInit``: the process keeps the libnvidia-ml it loaded, which no longer
matches the driver; only a new exporter process loads the new library, which the log says (the GPU Operator's driver
upgrade restarts its operands). The driver version label is not read again: NVML answers only a driver of the
library's own version, so it cannot have changed.

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from typing import Any

from exporters.backends.nvml_identity import Gpus, identify

log = logging.getLogger(__name__)
# pynvml's exceptions that say the library, not a GPU, stopped answering
GONE = ("NVMLError_Uninitialized", "NVMLError_DriverNotLoaded", "NVMLError_LibRmVersionMismatch")


class NvmlInit:
    """Whether NVML answers, and one re-initialisation per call to `restart` while it does not (module docstring)."""

    def __init__(self, nvml: Any, hostname: str = "", driver_version: str = "") -> None:
        self.nvml, self.hostname, self.driver_version = nvml, hostname, driver_version
        self.gone: tuple[type[Exception], ...] = tuple(getattr(nvml, n) for n in GONE if hasattr(nvml, n))
        self.down: Exception | None = None   # the error that said NVML stopped answering; None while it answers
        self.held = True      # this process's nvmlInit counts (the backend's, at start)
        self.failures = 0     # re-initialisations that failed
        self.reinits = 0      # re-initialisations that succeeded
        self._said: set[str] = set()
        self.waiting: tuple[str, ...] = ()   # GPUs whose read, still inside NVML, holds off a re-initialisation

    def lost(self, exc: Exception) -> None:
        """NVML raised `exc` (one of `gone`): every read is blind until `restart` succeeds."""
        if self.down is None:
            log.error("NVML stopped answering (%s: %s): every field of every GPU is an error until it is initialised "
                      "again, tried once at each read", type(exc).__name__, exc)
        self.down = exc
        if isinstance(exc, getattr(self.nvml, "NVMLError_Uninitialized", ())):
            self.held = False   # NVML says this process's initialisation no longer counts

    def no_gpu(self) -> None:
        """NVML answered at start but named no GPU (a driver still coming up): down until a `restart` names one."""
        log.error("NVML names no GPU: none is served until it names one, asked again at each read")
        self.down = self._not_found()
        self._said.add(type(self.down).__name__)   # said: the failed re-initialisations need not say it again

    def _not_found(self) -> Exception:
        nvml = self.nvml
        return nvml.NVMLError_NotFound() if hasattr(nvml, "NVMLError_NotFound") else nvml.NVMLError()

    def why(self) -> str:
        """What says NVML does not answer, for a caller that refuses its work meanwhile."""
        wait = f" once the read of {', '.join(self.waiting)} returns" if self.waiting else ""
        return (f"NVML does not answer ({type(self.down).__name__}: {self.down}), initialised again at the next "
                f"read{wait}")

    def answers(self, served: Sequence[str], serve: Callable[[Gpus], None]) -> bool:
        """Whether NVML answers, after one `restart` where it did not; `serve` is handed the GPUs it names then."""
        if self.down is None:
            return True
        gpus = self.restart(served)
        if gpus is not None:
            serve(gpus)
        return gpus is not None

    def deferred(self, stuck: Sequence[str]) -> None:
        """NVML is down, but not initialised again while the reads of `stuck` (GPU UUIDs) are still inside it:
        ``nvmlShutdown`` under a call in flight, and what that call allocated freed after it, could crash the process.
        Logged once per episode; `why` says so."""
        self.waiting = tuple(stuck)
        if "deferred" not in self._said:
            self._said.add("deferred")
            log.error("NVML is not initialised again while a GPU's read is still inside it (%s): every field stays an "
                      "error until that read returns", ", ".join(stuck))

    def refusal(self, limits_read: int | None) -> str | None:
        """Why no power limit may be set now, or None: NVML does not answer, or it was initialised again since the
        limits the caps were judged on were read (`limits_read`: `reinits` then; None: never read)."""
        if self.down is not None:
            return self.why()
        if limits_read not in (None, self.reinits):
            return "NVML was initialised again since the power limits were read: set at the next sync"
        return None

    def restart(self, served: Sequence[str]) -> Gpus | None:
        """``nvmlInit`` again and the GPUs NVML names now, or None (still unusable: counted, logged). `served`: the
        UUIDs served until now, to say which are gone and which are new."""
        nvml = self.nvml
        self.waiting = ()
        self._release()
        try:
            nvml.nvmlInit()
            self.held = True
            found = identify(nvml, self.hostname, self.driver_version)
        except nvml.NVMLError as exc:
            return self._failed(exc)
        if not found.identity:
            return self._failed(self._not_found(), "NVML names no GPU")
        named = [g.uuid for g in found.identity]
        for uuid in served:
            if uuid not in named:
                log.error("GPU %s is gone: NVML no longer names it after it was initialised again; no longer served "
                          "(its series end)", uuid)
        new = [u for u in named if u not in served]
        if new:
            log.warning("NVML names GPUs not served before (%s): served from now on", ", ".join(new))
        log.warning("NVML initialised again after %s: serving %d GPUs, %d of the %d served before",
                    type(self.down).__name__, len(named), len(named) - len(new), len(served))
        self.down, self._said = None, set()
        self.reinits += 1
        return found

    def _release(self) -> None:
        if self.held:
            self.held = False
            with contextlib.suppress(self.nvml.NVMLError):
                self.nvml.nvmlShutdown()

    def _failed(self, exc: Exception, why: str = "") -> None:
        self._release()   # an nvmlInit that succeeded before the GPUs could be named
        self.failures += 1
        kind = type(exc).__name__
        if kind not in self._said:
            self._said.add(kind)
            hint = (": this process's libnvidia-ml does not match the driver loaded now, which only a restart of "
                    "the exporter mends" if kind == "NVMLError_LibRmVersionMismatch" else "")
            log.error("NVML could not be initialised again (%s: %s)%s; every field stays an error, tried again at "
                      "the next read", kind, why or exc, hint)
        return None

    def close(self) -> None:
        self._release()
