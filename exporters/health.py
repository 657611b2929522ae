"""Liveness and readiness of `gputide exporter`, from its collections, never from NVML itself.

The exporter reads NVML only when a collection runs (a scrape of ``/metrics``, or the one it makes as it starts),
and collections run one at a time (`exporters.collector`). A probe on ``/metrics`` therefore ran a whole NVML read
every time the kubelet asked, and an NVML call that never returns made every later scrape and probe wait behind
it until the kubelet restarted the exporter. `TrackedCollector` wraps the registry a scrape renders and tells
`CollectHealth` when each collection begins and ends; the probes only read that:

* ``/healthz`` (liveness) answers 200 while no collection has been running for longer than `stuck_after_s`
  (`DEFAULT_STUCK_AFTER_S`, 5 minutes: a healthy read takes well under a second, Prometheus gives up on a scrape
  after 10 s, and a GPU in recovery may answer NVML slowly for tens of seconds), 503 with the collection's age
  otherwise. No scrape for a long time is not stuck: the exporter collects when asked, and Prometheus being away
  is no reason to restart it. A restart costs what the process remembers (the last XID of each GPU reads 0 again,
  the event stream is registered anew) and mends no hung driver, hence a limit far beyond any slow read: only a
  call that never returns gets the process restarted, which may free an NVML library stuck in this process, and
  does end the scrape threads piling up behind it (`/metrics` keeps failing, so `up` and the exporter's alerts
  say it meanwhile).
* ``/readyz`` (readiness) answers 200 once a collection has succeeded (the exporter makes one as it starts, so a
  pod becomes ready, and a DaemonSet rollout moves on, without waiting for Prometheus) while it is live.

dcgm-exporter's ``/health`` answers from its own state without asking DCGM (and never fails for a stuck read);
node-exporter's probes ask for its landing page, which reads nothing either.
"""

from __future__ import annotations

import itertools
import logging
import threading
import time
from collections.abc import Callable, Iterator

from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

log = logging.getLogger(__name__)

DEFAULT_STUCK_AFTER_S = 300.0


class CollectHealth:
    """When collections began and ended (`begin()`, `end()`; thread-safe) and what the probes make of it."""

    def __init__(self, stuck_after_s: float = DEFAULT_STUCK_AFTER_S,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.stuck_after_s, self.clock = stuck_after_s, clock
        self._lock = threading.Lock()
        self._tokens = itertools.count()
        self._running: dict[int, float] = {}   # token -> when that collection began
        self.last_end: float | None = None
        self.last_ok: float | None = None
        self.last_failed = False

    def begin(self) -> int:
        with self._lock:
            token = next(self._tokens)
            self._running[token] = self.clock()
            return token

    def end(self, token: int, ok: bool) -> None:
        with self._lock:
            self._running.pop(token, None)
            self.last_end = self.clock()
            self.last_failed = not ok
            if ok:
                self.last_ok = self.last_end

    def live(self) -> tuple[bool, str]:
        with self._lock:
            oldest = min(self._running.values(), default=None)
            now, last_end = self.clock(), self.last_end
        if oldest is not None:
            age = now - oldest
            if age > self.stuck_after_s:
                return False, f"stuck: a collection has been running for {age:.0f} s (limit {self.stuck_after_s:.0f} s)"
            return True, f"ok: a collection has been running for {age:.0f} s"
        if last_end is None:
            return True, "ok: no collection has run yet"
        return True, f"ok: the last collection ended {now - last_end:.0f} s ago"

    def ready(self) -> tuple[bool, str]:
        if self.last_ok is None:
            failed = " (the last one failed)" if self.last_failed else ""
            return False, f"not ready: no collection has succeeded yet{failed}"
        return self.live()


class TrackedCollector(Collector):
    """`inner`'s families, each collection reported to `health` (begun, then ended ok or not)."""

    def __init__(self, inner: Collector, health: CollectHealth) -> None:
        self.inner, self.health = inner, health

    def describe(self) -> list[Metric]:
        return []

    def collect(self) -> Iterator[Metric]:
        token, ok = self.health.begin(), False
        try:
            families = list(self.inner.collect())
            ok = True
        finally:
            self.health.end(token, ok)
        yield from families


def first_collection(collector: Collector, name: str = "gputide-first-collection") -> threading.Thread:
    """Collect once from a daemon thread (so an NVML read that never returns leaves the caller free): the exporter
    is ready without waiting for a scrape, and the liveness limit covers that read as any other."""

    def collect() -> None:
        try:
            for _ in collector.collect():
                pass
        except Exception:   # noqa: BLE001 - said in the log and by /readyz; the next scrape tries again
            log.exception("the first collection failed")

    thread = threading.Thread(target=collect, name=name, daemon=True)
    thread.start()
    return thread
