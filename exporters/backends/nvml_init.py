"""NVML initialised again after it stops answering under a running exporter: `NvmlInit(nvml)`, one per backend.

NVML can become unusable while the exporter runs: a user of the library in this process calls ``nvmlShutdown`` once
too often (every call then raises ``NVMLError_Uninitialized``), the kernel driver is unloaded
(``NVMLError_DriverNotLoaded``), or it is reloaded at another version than the libnvidia-ml this process loaded
(``NVMLError_LibRmVersionMismatch``). These are the library's errors, not a GPU's (`gone`): the backend stops its
read at the first one and calls `lost(exc)`; until NVML answers again every field of every GPU is an error.

At each read while NVML is down the backend calls `restart(uuids)` once: ``nvmlShutdown`` where this process's
reference still counts (not after Uninitialized: there it no longer does, and a shutdown would take another user's),
``nvmlInit``, and the GPUs named again by UUID (`exporters.backends.nvml_identity`), since a handle is valid for one
initialisation only and an index can move when a reload loses or finds a GPU. It answers the new handle of each GPU
of `uuids` (None for one NVML no longer names: every field an error until the exporter restarts) and every index's
handle, or None while NVML is still unusable: logged (the first time for each kind of error), counted in
`failures`, tried again at the next read. NVML naming none of `uuids` is such a failure (what it names now is not
the GPUs served). A GPU not served at start is not served after a re-initialisation either (its labels would appear
mid-run); `reinits` counts those that succeeded.

A version mismatch is not mended by ``nvmlInit``: the process keeps the libnvidia-ml it loaded, which no longer
matches the driver; only a new exporter process loads the new library, which the log says (the GPU Operator's driver
upgrade restarts its operands). The driver version label is not read again: NVML answers only a driver of the
library's own version, so it cannot have changed.

This module never imports `pynvml`: it uses the `nvml` module the backend was given.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Sequence
from typing import Any, NamedTuple

from exporters.backends.nvml_identity import identify

log = logging.getLogger(__name__)
# pynvml's exceptions that say the library, not a GPU, stopped answering
GONE = ("NVMLError_Uninitialized", "NVMLError_DriverNotLoaded", "NVMLError_LibRmVersionMismatch")


class Named(NamedTuple):
    handles: list[Any]    # the served GPUs' new handles, in the order of the UUIDs asked for; None: not named
    by_index: list[Any]   # every NVML index's handle, None for a GPU NVML cannot name


class NvmlInit:
    """Whether NVML answers, and one re-initialisation per call to `restart` while it does not (module docstring)."""

    def __init__(self, nvml: Any) -> None:
        self.nvml = nvml
        self.gone: tuple[type[Exception], ...] = tuple(getattr(nvml, n) for n in GONE if hasattr(nvml, n))
        self.down: Exception | None = None   # the error that said NVML stopped answering; None while it answers
        self.held = True      # this process's nvmlInit counts (the backend's, at start)
        self.failures = 0     # re-initialisations that failed
        self.reinits = 0      # re-initialisations that succeeded
        self._said: set[str] = set()

    def lost(self, exc: Exception) -> None:
        """NVML raised `exc` (one of `gone`): every read is blind until `restart` succeeds."""
        if self.down is None:
            log.error("NVML stopped answering (%s: %s): every field of every GPU is an error until it is initialised "
                      "again, tried once at each read", type(exc).__name__, exc)
        self.down = exc
        if isinstance(exc, getattr(self.nvml, "NVMLError_Uninitialized", ())):
            self.held = False   # NVML says this process's initialisation no longer counts

    def restart(self, uuids: Sequence[str]) -> Named | None:
        """``nvmlInit`` again and the GPUs `uuids` named anew, or None (still unusable: counted, logged)."""
        nvml = self.nvml
        self._release()
        try:
            nvml.nvmlInit()
            self.held = True
            found = identify(nvml, "")
        except nvml.NVMLError as exc:
            return self._failed(exc)
        by_uuid = {g.uuid: h for g, h in zip(found.identity, found.handles, strict=True)}
        handles = [by_uuid.get(u) for u in uuids]
        if uuids and all(h is None for h in handles):
            return self._failed(nvml.NVMLError_NotFound() if hasattr(nvml, "NVMLError_NotFound")
                                else nvml.NVMLError(), f"none of the {len(uuids)} GPUs served was named again")
        for u, h in zip(uuids, handles, strict=True):
            if h is None:
                log.error("GPU %s not named by NVML after it was initialised again: every field of it is an error "
                          "until the exporter restarts", u)
        new = sorted(set(by_uuid) - set(uuids))
        if new:
            log.warning("NVML names GPUs not served (%s): served once the exporter restarts", ", ".join(new))
        log.warning("NVML initialised again after %s: %d of %d GPUs named again", type(self.down).__name__,
                    sum(h is not None for h in handles), len(uuids))
        self.down, self._said = None, set()
        self.reinits += 1
        return Named(handles, found.by_index)

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
