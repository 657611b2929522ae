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
threads as GPUs, and none between collections. A late read that returns (a GPU slower than the deadline, not hung)
is served at a later `run` if it began at most `max_age_s` ago (the exporter's ``--serve-stale-for``, 30 s: what a
late collection is served for) and read without an error: a `run` that finds it still running, and not that old,
waits for it too, within its own deadline, and starts no other read of that GPU; a `run` that finds it returned
reads the GPU again all the same and serves it only should that new read be late too. A GPU always slower than the
deadline is thus served late rather than never (every collection while it returns between scrapes, every other one
while it is slower than the scrape interval). The backend drops a late read of another NVML initialisation. The log
says when a GPU's read turns late, stuck (still running after `max_age_s`: no longer waited for, and what it reads
then is not served), and in time again, not at every collection. Each read runs inside `watching(what)`
(`exporters.health.CollectHealth.watching` where the exporter hands it over): the probes then see a read still stuck
after its collection ended as they saw a stuck collection, not ready past the collection timeout, not live past
``--stuck-after``.

Other NVML calls on a GPU run the same way, in that GPU's own job (`call(jobs, what)`): the power-cap agent's, and
the XID drain's registrations (`exporters.backends.nvml_xid`, under what is left of the reads' deadline: `until`).
One hung in NVML leaves its GPU stuck, as a read does (collections, the MIG lookup, the XID drain and the agent then
leave it alone), rather than the caller holding the backend's lock for good. A GPU with a read or a call still
running gets no other job. Calls are kept apart from reads: what a call returns late is never served (the caller's
own: the agent's is handed back to it, `exporters.backends.nvml_power`), and a call takes nothing of the reads' (a
slow GPU's late read that has returned stays for the next collection to serve).

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
MAX_AGE_S = 30.0   # a late read served at the next collection began at most this long ago (--serve-stale-for)
LATE, STUCK = "late", "stuck"   # a GPU's read past its deadline; still running after max_age_s


def _unwatched(what: str) -> AbstractContextManager[Any]:
    return contextlib.nullcontext()


class Read:
    """One GPU's read: what it returned (`result`) or raised (`error`) once `done` is set; `what` names it in the
    log ("read", or what a call is: `GpuReads.call`)."""

    __slots__ = ("done", "error", "late", "result", "started", "what")

    def __init__(self, started: float, what: str = "read") -> None:
        self.started, self.what = started, what
        self.done = threading.Event()
        self.result: Any = None
        self.error: BaseException | None = None
        self.late = False   # served at a collection after its own; a call: past its deadline (it missed it)


class GpuReads:
    """The reads of one backend's GPUs, keyed by UUID (module docstring)."""

    def __init__(self, timeout_s: float, *, watching: Watching = _unwatched,
                 clock: Callable[[], float] = time.monotonic, max_age_s: float = MAX_AGE_S) -> None:
        self.timeout_s, self.watching, self.clock, self.max_age_s = timeout_s, watching, clock, max_age_s
        self._running: dict[str, Read] = {}   # reads not done when their collection ended
        self._calls: dict[str, Read] = {}     # calls (the agent's, XID registrations) past their deadline
        self._state: dict[tuple[str, str], str] = {}   # (GPU, what: read or call) -> LATE or STUCK, as logged

    def run(self, jobs: Mapping[str, Callable[[], Any]]) -> dict[str, Read]:
        """The reads of `jobs` done within `timeout_s`, by key, else an earlier late read of it that returned since
        (`Read.late`; module docstring); a key missing is late or stuck (nothing read)."""
        started: dict[str, Read] = {}
        returned: dict[str, Read] = {}   # late reads of earlier collections, done since
        running: dict[str, Read] = {}    # late reads still running: waited for too, not started again
        done_earlier: dict[str, Read] = {}   # late reads of GPUs a call holds: served, none started
        for key, job in jobs.items():
            if (earlier := self._running.get(key)) is not None:
                if not earlier.done.is_set():
                    running[key] = earlier   # waited for while it could be served, else only said stuck
                    continue
                del self._running[key]
                returned[key] = earlier
            if self._calling(key):   # a call still inside NVML: not read, its late read served if it can
                if (earlier := returned.get(key)) is not None and self._servable(earlier):
                    done_earlier[key] = earlier
                continue
            started[key] = self._start(key, job, Read(self.clock()))
        deadline = self.clock() + self.timeout_s
        for read in (*started.values(), *(r for r in running.values() if not self._too_old(r))):
            read.done.wait(max(0.0, deadline - self.clock()))
        done = {**self._still_running(running), **done_earlier}
        for key, read in started.items():
            if read.done.is_set():
                done[key] = read
                self._say(key, None, read)
                continue
            self._running[key] = read
            self._say(key, LATE, read)
            if (earlier := returned.get(key)) is not None and self._servable(earlier):
                done[key] = earlier
        return done

    def call(self, jobs: Mapping[str, Callable[[], Any]], what: str, *, until: float | None = None) -> dict[str, Read]:
        """Calls that are not reads (`what`: the power-cap agent's, the XID drain's registrations), each in its GPU's
        own job, by key: `late` where it has not returned within `timeout_s`, or by `until` (`clock` time) where
        given (its GPU stuck until it does; what it returns then is the caller's to use, `done` telling when: never
        served to a collection); a key missing has a read or call still inside NVML (not called: it would hang
        too). A late read that has returned is left for the next collection to serve."""
        started: dict[str, Read] = {}
        for key, job in jobs.items():
            if self._calling(key) or ((read := self._running.get(key)) is not None and not read.done.is_set()):
                continue
            started[key] = self._start(key, job, Read(self.clock(), what))
        now = self.clock()
        deadline = now + self.timeout_s if until is None else until
        given_s = max(0.0, deadline - now)   # what is left of `until` may be less than `timeout_s`
        for read in started.values():
            read.done.wait(max(0.0, deadline - self.clock()))
        for key, read in started.items():
            if read.done.is_set():
                self._say(key, None, read)
            else:
                read.late = True
                self._calls[key] = read
                self._say(key, LATE, read, given_s)
        return started

    def young(self, read: Read, max_age_s: float) -> bool:
        """Whether `read` began at most `max_age_s` ago (a late call's caller's own bound: the power-cap agent's
        limit reads are used within two of its intervals, whatever the reads' `max_age_s`)."""
        return self.clock() - read.started <= max_age_s

    def _calling(self, key: str) -> bool:
        """Whether a call on GPU `key` is still inside NVML (said stuck once past `max_age_s`); one that
        has returned is forgotten."""
        if (call := self._calls.get(key)) is None:
            return False
        if call.done.is_set():
            del self._calls[key]
            return False
        if self._too_old(call):
            self._say(key, STUCK, call)
        return True

    def _start(self, key: str, job: Callable[[], Any], read: Read) -> Read:
        threading.Thread(target=self._read, args=(key, job, read), name=f"gputide-read-{key}", daemon=True).start()
        return read

    def _still_running(self, running: Mapping[str, Read]) -> dict[str, Read]:
        """Of the late reads found running at this `run`, those that returned within its deadline, to serve."""
        done = {}
        for key, earlier in running.items():
            if not earlier.done.is_set():
                if self._too_old(earlier):   # not served should it return
                    self._say(key, STUCK, earlier)
                continue
            del self._running[key]
            if self._servable(earlier):
                done[key] = earlier
        return done

    def _servable(self, earlier: Read) -> bool:
        """Whether a late read may be served (marked `late`): it read without an error, at most `max_age_s` ago."""
        if earlier.error is not None or self._too_old(earlier):
            return False
        earlier.late = True
        return True

    def _too_old(self, read: Read) -> bool:
        return self.clock() - read.started > self.max_age_s

    def _say(self, key: str, state: str | None, read: Read, given_s: float | None = None) -> None:
        """Log GPU `key`'s reads (or one kind of its calls, `what`) turning late, stuck, or in time again; nothing
        while they stay as they were. Each kind apart: one key for all calls said a late Set's GPU's limit reads
        'return in time again'. `given_s`: how long a late call was waited for (`timeout_s` where not said; a call
        `until` a deadline got what was left of it, which the log said was `timeout_s`)."""
        at = (key, read.what)
        was = self._state.get(at)
        if state == was:
            return
        if state is None:
            del self._state[at]
            log.warning("GPU %s: its %ss return in time again", key, read.what)
            return
        self._state[at] = state
        if state == LATE and read.what != "read":
            log.warning("GPU %s: the %s has not returned after %g s (a GPU in recovery?): the GPU is not asked "
                        "again, nor read, until it returns", key, read.what,
                        self.timeout_s if given_s is None else round(given_s, 2))
        elif state == LATE:
            log.warning("GPU %s: its read has not returned after %g s: no series for it but its XID this collection "
                        "(its fields are collect errors); what it reads is served at the next collection if it has "
                        "returned by then", key, self.timeout_s)
        else:
            log.warning("GPU %s: its %s is still inside NVML after %.0f s: not read again until it returns, and "
                        "what it reads then is not served", key, read.what, self.clock() - read.started)

    def stuck(self) -> list[str]:
        """The GPUs whose read is still running after its collection ended, or a call after its deadline."""
        return [key for key, read in (*self._running.items(), *self._calls.items()) if not read.done.is_set()]

    def _read(self, key: str, job: Callable[[], Any], read: Read) -> None:
        try:
            with self.watching(f"GPU {key}'s {read.what}"):
                read.result = job()
        except BaseException as exc:   # noqa: BLE001 - handed to the collection, which raises or counts it
            read.error = exc
        finally:
            read.done.set()
