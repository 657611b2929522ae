"""Each GPU's read in a thread of its own, with one deadline for them all: `GpuReads(timeout_s)`.

An NVML call can block for long, or for good (a GPU in recovery, falling off the bus), and Python cannot interrupt
it. Read one GPU after another, one GPU's hung call held up the whole collection: past the collection timeout every
scrape got the last complete collection, and 30 s on a 503, for every GPU of the node though one alone was stuck
(`exporters.health`); and a GPU slow to answer (about 11 calls per GPU, 50 ms each) made 8 GPUs take 4.5 s of the
8 s collection timeout.

`run(jobs)` starts each GPU's read in a daemon thread (a call stuck in NVML cannot keep the process from exiting) and
waits for them all until `timeout_s` after it started them. A read done by then gives what it returned or raised;
one not done is *late*: the backend counts that GPU's fields as errors and publishes none of its series this
collection, the other GPUs are served. A late read keeps its thread until NVML returns, and until then the GPU is
not read again (*stuck*, likewise errors): no second thread piles up behind the first, so there are at most as many
threads as GPUs, and none between collections. What a read returns after its collection ended is dropped; the GPU is
read again at the next `run`. Each read runs inside `watching(what)` (`exporters.health.CollectHealth.watching` where
the exporter hands it over): the probes then see a read still stuck after its collection ended as they saw a stuck
collection, not ready past the collection timeout, not live past ``--stuck-after``.

This module never imports `pynvml`.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

log = logging.getLogger(__name__)

Watching = Callable[[str], AbstractContextManager[Any]]


def _unwatched(what: str) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


class Read:
    """One GPU's read: what it returned (`result`) or raised (`error`) once `done` is set."""

    __slots__ = ("done", "error", "result", "started")

    def __init__(self, started: float) -> None:
        self.started = started
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None


class GpuReads:
    """The reads of one backend's GPUs, keyed by UUID (module docstring)."""

    def __init__(self, timeout_s: float, *, watching: Watching = _unwatched,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.timeout_s, self.watching, self.clock = timeout_s, watching, clock
        self._running: dict[str, Read] = {}   # reads not done when their collection ended

    def run(self, jobs: Mapping[str, Callable[[], Any]]) -> dict[str, Read]:
        """The reads of `jobs` done within `timeout_s`, by key; a key missing is late or stuck (not read)."""
        started: dict[str, Read] = {}
        for key, job in jobs.items():
            if (stuck := self._running.get(key)) is not None:
                if not stuck.done.is_set():
                    continue
                del self._running[key]
                log.warning("GPU %s: its read returned after %.0f s: read again from this collection", key,
                            self.clock() - stuck.started)
            started[key] = read = Read(self.clock())
            threading.Thread(target=self._read, args=(key, job, read), name=f"gputide-read-{key}",
                             daemon=True).start()
        deadline = self.clock() + self.timeout_s
        for read in started.values():
            read.done.wait(max(0.0, deadline - self.clock()))
        done = {}
        for key, read in started.items():
            if read.done.is_set():
                done[key] = read
            else:
                self._running[key] = read
                log.warning("GPU %s: its read has not returned after %g s: no series for it (its fields are collect "
                            "errors) and it is not read again until that read returns", key, self.timeout_s)
        return done

    def stuck(self) -> list[str]:
        """The GPUs whose read is still running after its collection ended."""
        return [key for key, read in self._running.items() if not read.done.is_set()]

    def _read(self, key: str, job: Callable[[], Any], read: Read) -> None:
        try:
            with self.watching(f"GPU {key}'s read"):
                read.result = job()
        except BaseException as exc:   # noqa: BLE001 - handed to the collection, which raises or counts it
            read.error = exc
        finally:
            read.done.set()
