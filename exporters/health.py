"""Liveness and readiness of `gputide exporter`, and collections that never keep a scrape waiting for long; neither
ever reads NVML itself.

The exporter reads NVML only when a collection runs (a scrape of ``/metrics``, or the one it makes as it starts).
An NVML call can block for good (a GPU falling off the bus), and Python cannot interrupt it. A scrape used to wait
for it, so every later scrape queued behind the lock that keeps collections one at a time (`exporters.collector`)
until the process was restarted, one more thread each. `CollectHealth.run` now runs each collection in a thread of
its own, at most one at a time, and a scrape waits for it for at most `collect_timeout_s`
(`DEFAULT_COLLECT_TIMEOUT_S`, 8 s: under Prometheus's default 10 s scrape timeout, which the PodMonitor keeps, with
room to send the answer; a healthy read takes well under a second):

* a scrape that finds no collection running starts one; a scrape that finds one running (another scrape's, the
  first collection's, or one that has outrun the timeout and still not returned) waits for that one, up to its
  timeout counted from when it began: two scrapes at once share one NVML read, and a hung read is never joined by
  a second one;
* a collection done in time is the scrape's answer and the exposition kept as the last complete one;
* a collection not done in time is counted once in ``gputide_exporter_collect_timeouts_total``, and the scrape
  gets the last complete exposition if that collection began at most `serve_stale_s` ago
  (`DEFAULT_SERVE_STALE_S`, 30 s: two scrape intervals), else ``503`` with what is running and for how long (so
  ``up`` reads 0 and the GPU series go stale, rather than a hung GPU's last values living on). Every answer ends with
  ``gputide_exporter_collection_age_seconds``: how long ago the collection it carries began;
* a collection that fails (an exception) fails the scrape as before: only a slow one is answered from the past,
  and one that gave up waiting (a `TimeoutError`: `exporters.backends.nvml.NvmlBusy`, the power-cap agent's NVML
  call holding the backend) as a slow one is: counted, the last complete exposition, else ``503`` naming why.

One hung GPU no longer hangs the collection: the NVML backend reads each GPU in a thread of its own with a deadline
(`exporters.backends.nvml_gpu_reads`, 3 s by default), and a GPU past it has no series in that collection but its
XID (heard by the event drain), its other fields counted as errors, while the node's other GPUs are served in
time; it is not read again until its call returns. The limits above remain for what still runs in the collection's own
thread (the XID event drain, a re-initialisation of NVML, the kubelet's answer, a backend without per-GPU reads) and for
a GPU deadline set above the collection timeout. A GPU read left hung holds no collection open, so only its `watching`
(below) shows it to the probes.

`TrackedCollector` wraps the registry a scrape renders, runs it through `CollectHealth.run`, and `CollectHealth`
keeps when each collection began and ended; the probes only read that:

* ``/healthz`` (liveness) answers 200 while no collection has been running for longer than `stuck_after_s`
  (`DEFAULT_STUCK_AFTER_S`, 5 minutes: Prometheus gives up on a scrape after 10 s, and a GPU in recovery may answer
  NVML slowly for tens of seconds), 503 with the collection's age otherwise. No scrape for a long time is not
  stuck: the exporter collects when asked, and Prometheus being away is no reason to restart it. A restart costs
  what the process remembers (the last XID of each GPU reads 0 again, the event stream is registered anew) and
  mends no hung driver, hence a limit far beyond any slow read: only a call that never returns gets the process
  restarted, which may free an NVML library stuck in this process.
* ``/readyz`` (readiness) answers 200 once a collection has succeeded (the exporter makes one as it starts, so a
  pod becomes ready, and a DaemonSet rollout moves on, without waiting for Prometheus) while it is live and no
  collection has outrun the collection timeout: a pod whose NVML read hangs is not ready (a rollout waits, and
  ``kubectl get pods`` shows it) well before liveness restarts it. A collection that read nothing at all (every
  field of every GPU failed, or no GPU to read: `exporters.collector.nothing_read`) is a success that leaves the
  exporter not ready, with the reason, until a collection reads something: NVML uninitialised under the exporter,
  its driver unloaded or reloaded, answers scrapes with no GPU series, and a rollout must not call that ready.
  Liveness does not change with it: a driver that does not answer is not mended by a restart (which would exit at
  start while the driver is away, then crash-loop, and forget each GPU's last XID), while the NVML backend
  initialises NVML again at each collection (`exporters.backends.nvml_init`) and is ready again at the first that
  reads a field.

The exporter's power-cap agent (``--power-caps-file``) shares NVML, and the backend's lock, with the collections: a
power-limit call that never returns holds that lock, so the next collection waits behind it and the limits above
apply to that collection (scrapes answered in time, then not ready, then not live); it waits the collection timeout
at most, then fails (`exporters.backends.nvml.NvmlBusy`) and ends, and the agent leaves a GPU whose read is stuck
alone, so it does not hang on that GPU in the first place. A scrape alone starts a
collection, though: with none (Prometheus away) nothing would see the agent stuck, its caps never applied again.
So work that is not a collection but shares NVML with them runs inside `CollectHealth.watching` (each sync of the
exporter's agent loop, and each GPU's read where the NVML backend's `reads.watching` is set to it), which the probes
read as they read a collection: not ready once it has run longer than the collection timeout, not live once longer
than `stuck_after_s`, each naming it: a GPU whose call never returns still gets the process restarted, as a hung
collection did. Either way a cap is recorded as set
only once the call that set it has returned (`exporters.power_caps`), so one stuck when the kubelet restarts the
pod is applied again by the next agent.

`current_collection()` tells code running inside a collection which one it is (its number, when it began): the
kubelet's pod attribution (`exporters.podresources`) times its grace from collection starts and reads from
`last_complete` whether a scrape can still be answered with a collection from before the kubelet fell silent.

dcgm-exporter's ``/health`` answers from its own state without asking DCGM (and never fails for a stuck read);
node-exporter's probes ask for its landing page, which reads nothing either.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

from exporters.collector import nothing_read
from exporters.exposition import render_families

log = logging.getLogger(__name__)

DEFAULT_STUCK_AFTER_S = 300.0
DEFAULT_COLLECT_TIMEOUT_S = 8.0   # under Prometheus's default scrape timeout (10 s), which the PodMonitor keeps
DEFAULT_SERVE_STALE_S = 30.0      # two scrape intervals of the PodMonitor (15 s)

_collecting = threading.local()   # in a collection's own thread (`CollectHealth._collect`): .at (health, collection)


class CollectTimeout(TimeoutError):
    """A collection outran the collection timeout and no complete one is recent enough to answer with."""


@dataclass(eq=False)
class Collection:
    """One run of the registry's collectors (in a thread of its own) and what it gave."""

    started: float
    seq: int = 0   # its number: collections are numbered from 1 in the order they began
    done: threading.Event = field(default_factory=threading.Event)
    families: list[Metric] = field(default_factory=list)
    body: bytes = b""
    error: Exception | None = None
    timed_out: bool = False


class WatchedCalls:
    """Work in flight that a probe holds to a limit (`watching`, thread-safe), each with when it began (on `clock`)
    and what it is: the exporter's `CollectHealth` and the power-cap agent's `AgentHealth` read the oldest."""

    def __init__(self, clock: Callable[[], float]) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._calls: dict[int, tuple[float, str]] = {}   # token -> (when it began, what)

    @contextmanager
    def watching(self, what: str) -> Iterator[None]:
        with self._lock:
            token = next(self._tokens)
            self._calls[token] = (self.clock(), what)
        try:
            yield
        finally:
            with self._lock:
                self._calls.pop(token, None)

    def oldest(self) -> tuple[float, str] | None:
        """(when the longest-running work began, what it is), or None while none runs."""
        with self._lock:
            return min(self._calls.values(), default=None)


class CollectHealth:
    """When collections began and ended (`begin()`, `end()`; thread-safe), what the probes make of it, and the
    collections themselves, one at a time and bounded (`run`; module docstring)."""

    def __init__(self, stuck_after_s: float = DEFAULT_STUCK_AFTER_S, clock: Callable[[], float] = time.monotonic,
                 *, collect_timeout_s: float = DEFAULT_COLLECT_TIMEOUT_S,
                 serve_stale_s: float = DEFAULT_SERVE_STALE_S,
                 wait: Callable[[threading.Event, float], bool] = threading.Event.wait) -> None:
        """`wait(done, timeout_s)` is how a scrape waits for a collection: whether `done` was set within `timeout_s`
        on `clock` (`threading.Event.wait`, in real time, as `time.monotonic` counts; a test passes one that lets
        its own clock's time pass instead, so that nothing in it waits for a timeout)."""
        self.stuck_after_s, self.clock, self.wait = stuck_after_s, clock, wait
        self.collect_timeout_s, self.serve_stale_s = collect_timeout_s, serve_stale_s
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._running: dict[int, float] = {}   # token -> when that collection began
        self._watched = WatchedCalls(lambda: self.clock())   # `watching`; on `clock` as it is then
        self.last_end: float | None = None
        self.last_ok: float | None = None
        self.last_failed = False
        self.last_unread: str | None = None   # why the last successful collection read nothing, if it did
        self._runs = threading.Lock()   # guards the two below; taken before `_lock`, never inside it
        self._current: Collection | None = None
        self.last_complete: Collection | None = None
        self.timeouts = 0
        self._began = 0   # collections begun: the last one's number

    def begin(self) -> int:
        with self._lock:
            token = next(self._tokens)
            self._running[token] = self.clock()
            return token

    def end(self, token: int, ok: bool, unread: str | None = None) -> None:
        """Collection `token` ended; if `ok`, `unread` says why it read nothing at all (None: it read something)."""
        with self._lock:
            self._running.pop(token, None)
            self.last_end = self.clock()
            self.last_failed = not ok
            if ok:
                self.last_ok = self.last_end
                self.last_unread = unread

    @contextmanager
    def watching(self, what: str) -> Iterator[None]:
        """Work that shares NVML with the collections (the power-cap agent's sync) runs inside: the probes hold it
        to the collections' limits (module docstring), `what` naming it in their answers."""
        with self._watched.watching(what):
            yield

    def _oldest(self) -> tuple[tuple[float, str] | None, float | None, float, float | None]:
        """(how long the longest-running collection or watched work has run and what it is, or None; when the
        oldest running collection began, or None; now; when the last collection ended)."""
        watched = self._watched.oldest()
        with self._lock:
            now = self.clock()
            collection = min(self._running.values(), default=None)
            began = [] if watched is None else [watched]
            if collection is not None:
                began.append((collection, "a collection"))
            first = min(began, default=None)
            return None if first is None else (now - first[0], first[1]), collection, now, self.last_end

    def live(self) -> tuple[bool, str]:
        longest, collection, now, last_end = self._oldest()
        if longest is not None and longest[0] > self.stuck_after_s:
            age, what = longest
            return False, f"stuck: {what} has been running for {age:.0f} s (limit {self.stuck_after_s:.0f} s)"
        if collection is not None:
            return True, f"ok: a collection has been running for {now - collection:.0f} s"
        if last_end is None:
            return True, "ok: no collection has run yet"
        return True, f"ok: the last collection ended {now - last_end:.0f} s ago"

    def ready(self) -> tuple[bool, str]:
        if self.last_ok is None:
            failed = " (the last one failed)" if self.last_failed else ""
            return False, f"not ready: no collection has succeeded yet{failed}"
        live = self.live()
        longest = self._oldest()[0]
        if live[0] and longest is not None and longest[0] > self.collect_timeout_s:
            return False, (f"not ready: {longest[1]} has been running for {longest[0]:.0f} s "
                           f"(timeout {self.collect_timeout_s:g} s)")
        if live[0] and self.last_unread is not None:
            return False, f"not ready: {self.last_unread}"
        return live

    def run(self, source: Collector) -> tuple[Collection, bool]:
        """(the collection a scrape answers with, whether it ran for this scrape): the running one or a new one,
        waited for up to the collection timeout, else the last complete one while it is recent enough. Raises what
        the collection raised, or `CollectTimeout`."""
        with self._runs:
            run = self._current
            if run is None:
                self._began += 1
                run = self._current = Collection(self.clock(), self._began)
                threading.Thread(target=self._collect, args=(source, run, self.begin()),
                                 name="gputide-collection", daemon=True).start()
        self.wait(run.done, max(0.0, min(self.collect_timeout_s, run.started + self.collect_timeout_s - self.clock())))
        if run.done.is_set():
            if run.error is None:
                return run, True
            if not isinstance(run.error, TimeoutError):
                raise run.error
        return self._instead_of(run), False

    def _collect(self, source: Collector, run: Collection, token: int) -> None:
        _collecting.at = (self, run)   # this thread runs `run` alone (`current_collection`)
        try:
            run.families = list(source.collect())
            run.body = render_families(run.families)
        except Exception as exc:   # noqa: BLE001 - handed to the scrapes waiting for it (a 500, as before)
            run.error = exc
        finally:
            self.end(token, run.error is None, None if run.error is not None else nothing_read(run.families))
            with self._runs:
                self._current = None
                if run.error is None:
                    self.last_complete = run
            run.done.set()
            if run.timed_out:
                log.warning("the collection that outran the %g s timeout ended after %.1f s", self.collect_timeout_s,
                            self.clock() - run.started)

    def _instead_of(self, run: Collection) -> Collection:
        """The last complete collection while recent enough, for `run`: one still running past the collection
        timeout, or one that gave up waiting (raised a `TimeoutError`: `exporters.backends.nvml.NvmlBusy`, the
        power-cap agent's NVML call holding the backend), which is no fault of the exporter's to answer with a 500;
        else `CollectTimeout` naming why."""
        failed = run.done.is_set() and run.error is not None
        with self._runs:
            if not run.timed_out:
                run.timed_out = True
                self.timeouts += 1
                if not failed:
                    log.warning("a collection has been running for %g s (the collection timeout): scrapes get the "
                                "last complete one while it began at most %g s ago, then fail; no other collection "
                                "starts until it ends", self.collect_timeout_s, self.serve_stale_s)
            last = self.last_complete
        now = self.clock()
        if last is not None and now - last.started <= self.serve_stale_s:
            return last
        had = "none has completed" if last is None else f"the last complete one began {now - last.started:.0f} s ago"
        why = (f"collection gave up: {run.error}" if failed else
               f"collection timed out: one has been running for {now - run.started:.0f} s (timeout "
               f"{self.collect_timeout_s:g} s)")
        raise CollectTimeout(f"{why} and {had} (served for up to {self.serve_stale_s:g} s)")

    def families(self, age_s: float) -> list[Metric]:
        """The exporter's own series about its collections, `age_s`: that of the collection a scrape carries."""
        timeouts = Metric("gputide_exporter_collect_timeouts", "Collections that outran the collection timeout "
                          "(an NVML call that did not return in time).", "counter")
        timeouts.add_sample("gputide_exporter_collect_timeouts_total", {}, float(self.timeouts))
        age = Metric("gputide_exporter_collection_age_seconds", "How long ago the collection whose samples this "
                     "scrape carries began (more than its duration: the last complete one, a newer one outran the "
                     "collection timeout).", "gauge")
        age.add_sample("gputide_exporter_collection_age_seconds", {}, max(0.0, age_s))
        return [timeouts, age]


class TrackedCollector(Collector):
    """`inner`'s families through `health`'s collections (`CollectHealth.run`): one at a time, bounded in time,
    each reported to `health` (begun, then ended ok or not)."""

    def __init__(self, inner: Collector, health: CollectHealth) -> None:
        self.inner, self.health = inner, health

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        """The families of a collection made for this call; `CollectTimeout` when it outran the timeout (the last
        complete exposition is `exposition`'s to serve: its families may have changed since)."""
        run, fresh = self.health.run(self.inner)
        if not fresh:
            raise CollectTimeout(f"collection timed out after {self.health.collect_timeout_s:g} s")
        yield from run.families

    def exposition(self) -> bytes:
        """The text a scrape answers with: a collection's (this one's, or the last complete one while recent
        enough), then the exporter's own series about its collections."""
        run, _ = self.health.run(self.inner)
        return run.body + render_families(self.health.families(self.health.clock() - run.started))


def current_collection() -> tuple[CollectHealth, Collection] | None:
    """(the `CollectHealth` whose collection this thread runs, that collection: its `seq`, its `started` on
    `health.clock`), else None: code not run by `CollectHealth.run` (a registry rendered directly, as tests and the
    simulated exporter's callers may)."""
    return getattr(_collecting, "at", None)


def first_collection(collector: Collector, name: str = "gputide-first-collection") -> threading.Thread:
    """Collect once from a daemon thread (so an NVML read that never returns leaves the caller free): the exporter
    is ready without waiting for a scrape, and the limits cover that read as any other."""

    def collect() -> None:
        try:
            for _ in collector.collect():
                pass
        except CollectTimeout:
            log.warning("the first collection has outrun the collection timeout; the exporter is ready once it ends")
        except Exception:   # noqa: BLE001 - said in the log and by /readyz; the next scrape tries again
            log.exception("the first collection failed")

    thread = threading.Thread(target=collect, name=name, daemon=True)
    thread.start()
    return thread
