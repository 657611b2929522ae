"""A hung NVML call (a GPU falling off the bus) made every later scrape wait behind it until the process was
restarted, one more blocked thread each. Collections now run one at a time in a thread of their own, a scrape waits
for at most the collection timeout, then gets the last complete exposition while it is recent enough, else a 503;
no second NVML read starts while one hangs, the timeout is counted, and /readyz says not ready meanwhile.

No test here measures or waits out a timeout: the scrapes wait through `Waits`, on the test's clock, and each
asserts what a scrape asked to wait for. Real waits here are bounded ones for a thread to get somewhere (an Event);
a scrape that waited for the hung read itself would never answer while the read hangs, which fails the test."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.collector import GpuCollector
from exporters.health import CollectHealth, TrackedCollector, first_collection
from exporters.server import serve
from tests.cli.test_cli_health import Clock, get

GPU = GpuIdentity("0", "GPU-0", "00000000:01:00.0", "nvidia0", "NVIDIA H100", "node-a")
TIMEOUT_S = 0.5   # the collection timeout here (8 s by default); a binary fraction, so the clock's sums are exact
BOUND_S = 10.0    # the most a test waits for a thread to get somewhere (it takes milliseconds)
TIMED_OUT = ("a collection has been running for 0.5 s (the collection timeout): scrapes get the last complete one "
             "while it began at most 30 s ago, then fail; no other collection starts until it ends")


class Backend:
    """Reads GPU temperatures 40, 41, 42 ...; `hang` makes a read wait until `release` is set; counts the reads
    and the most that ran at once."""

    identity = (GPU,)

    def __init__(self) -> None:
        self.reads = self.running = self.most_at_once = 0
        self.hang = False
        self.entered, self.release = threading.Event(), threading.Event()
        self._lock = threading.Lock()

    def hung(self) -> bool:
        """Whether a read that starts now, or has started, does not return until the test releases it."""
        return self.hang and not self.release.is_set()

    def read(self) -> GpuReadings:
        with self._lock:
            self.reads += 1
            self.running += 1
            self.most_at_once = max(self.most_at_once, self.running)
            temp = 39.0 + self.reads
        try:
            if self.hang:
                self.entered.set()
                self.release.wait(30)
            return GpuReadings(identity=self.identity, values={"DCGM_FI_DEV_GPU_TEMP": np.array([temp])})
        finally:
            with self._lock:
                self.running -= 1


class Waits:
    """The scrapes' waits for a collection (`CollectHealth`'s `wait`) on the test's clock. A collection whose read
    hangs does not end however long one waits: the wait's whole timeout passes on the clock at once, and it is not
    done. Any other collection ends by itself, and is waited for (`expire=False`: every one is, as in real time).
    `timeouts` are the timeouts asked for, in order; `began[n]` is set once n + 1 waits have begun."""

    def __init__(self, clock: Clock, backend: Backend, *, expire: bool = True) -> None:
        self.clock, self.backend, self.expire = clock, backend, expire
        self.timeouts: list[float] = []
        self.events: list[threading.Event] = []
        self.began = [threading.Event() for _ in range(16)]
        self._lock = threading.Lock()

    def __call__(self, done: threading.Event, timeout: float) -> bool:
        with self._lock:
            self.timeouts.append(timeout)
            self.events.append(done)
            self.began[len(self.timeouts) - 1].set()
            if self.expire and self.backend.hung():
                self.clock.now += timeout
                return done.is_set()
        return done.wait(timeout if not self.expire else BOUND_S)


@contextmanager
def exporter(backend: Backend, serve_stale_s: float = 30.0, *, timeout_s: float = TIMEOUT_S, expire: bool = True,
             ) -> Iterator[tuple[Clock, Waits, CollectHealth, Any]]:
    """(clock, waits, health, server) of an exporter on `backend`; on leaving, a hung read is released and the server
    closed, whatever the test asserted."""
    clock = Clock()
    waits = Waits(clock, backend, expire=expire)
    health = CollectHealth(clock=clock, collect_timeout_s=timeout_s, serve_stale_s=serve_stale_s, wait=waits)
    server = serve(GpuCollector(backend), port=0, health=health)
    try:
        yield clock, waits, health, server
    finally:
        backend.release.set()
        server.close()
        collections_end()   # so that none logs into the next test


def collections_end() -> None:
    """The collections' threads end (a released read returns at once; it logs as it ends)."""
    for t in threading.enumerate():
        if t.name == "gputide-collection":
            t.join(BOUND_S)
            assert not t.is_alive(), "a collection did not end"


def scrape(port: int) -> tuple[int, str]:
    return get(port, "/metrics")


def values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith(("DCGM_FI_DEV_GPU_TEMP", "gputide_exporter_collect"))}


def hang(backend: Backend, port: int) -> tuple[int, str]:
    """The answer to a scrape whose read hangs (and still hangs once it answered)."""
    backend.hang = True
    got: list[tuple[int, str]] = []
    t = threading.Thread(target=lambda: got.append(scrape(port)), daemon=True)
    t.start()
    assert backend.entered.wait(BOUND_S)
    t.join(BOUND_S)
    assert got, "the scrape waited for the hung read"
    assert backend.hung()
    return got[0]


def unhang(backend: Backend, health: CollectHealth) -> None:
    """The hung read returns, and its collection ends (the scrape that started it gave up on it long ago)."""
    run = health._current
    assert run is not None and not run.done.is_set()
    backend.hang = False
    backend.release.set()
    assert run.done.wait(BOUND_S), "the released collection did not end"
    collections_end()


def test_a_scrape_behind_a_hung_read_gets_the_last_complete_exposition_within_the_timeout(caplog):
    caplog.set_level(logging.WARNING, logger="exporters.health")
    backend = Backend()
    with exporter(backend) as (clock, waits, health, server):
        code, text = scrape(server.port)
        assert code == 200 and values(text)["gputide_exporter_collect_timeouts_total"] == 0
        code, text = hang(backend, server.port)
        assert waits.timeouts == [TIMEOUT_S, TIMEOUT_S]   # the hung read's scrape waited the timeout, no longer
        assert code == 200 and values(text) == {"DCGM_FI_DEV_GPU_TEMP": 40.0,
                                                "gputide_exporter_collect_timeouts_total": 1.0,
                                                "gputide_exporter_collection_age_seconds": 0.5}
        clock.now += 20
        code, text = scrape(server.port)   # the same hung collection: counted once, answered at once
        assert waits.timeouts[2:] == [0.0] and waits.events[2] is waits.events[1]
        assert code == 200 and values(text) == {"DCGM_FI_DEV_GPU_TEMP": 40.0,
                                                "gputide_exporter_collect_timeouts_total": 1.0,
                                                "gputide_exporter_collection_age_seconds": 20.5}
        assert backend.reads == 2 and backend.most_at_once == 1   # no second read beside the hung one
        assert health.timeouts == 1 and [r.getMessage() for r in caplog.records] == [TIMED_OUT]


def test_the_last_complete_exposition_is_served_for_serve_stale_s_then_a_scrape_fails_clearly_and_still_at_once():
    backend = Backend()
    with exporter(backend, serve_stale_s=30.0) as (clock, waits, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        clock.now += 29.5   # the last complete collection began 30 s ago: still served
        code, text = scrape(server.port)
        assert code == 200 and values(text)["gputide_exporter_collection_age_seconds"] == 30.0
        clock.now += 0.5
        assert scrape(server.port) == (503, "collection timed out: one has been running for 30 s (timeout 0.5 s) "
                                            "and the last complete one began 30 s ago (served for up to 30 s)\n")
        clock.now += 0.5
        assert scrape(server.port) == (503, "collection timed out: one has been running for 31 s (timeout 0.5 s) "
                                            "and the last complete one began 31 s ago (served for up to 30 s)\n")
        assert waits.timeouts == [TIMEOUT_S, TIMEOUT_S, 0.0, 0.0, 0.0]
        assert get(server.port, "/readyz") == (503, "not ready: a collection has been running for 31 s "
                                                    "(timeout 0.5 s)\n")
        assert backend.reads == 2 and health.timeouts == 1


def test_scrapes_piling_up_behind_a_hung_read_start_no_other_read_and_each_returns(caplog):
    caplog.set_level(logging.WARNING, logger="exporters.health")
    backend = Backend()
    with exporter(backend) as (clock, waits, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        results: list[tuple[int, str]] = []
        threads = [threading.Thread(target=lambda: results.append(scrape(server.port))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(BOUND_S)
        assert len(results) == 8 and {r[0] for r in results} == {200} and len({r[1] for r in results}) == 1
        assert values(results[0][1]) == {"DCGM_FI_DEV_GPU_TEMP": 40.0, "gputide_exporter_collect_timeouts_total": 1.0,
                                         "gputide_exporter_collection_age_seconds": 0.5}
        assert waits.timeouts == [TIMEOUT_S, TIMEOUT_S] + [0.0] * 8
        assert backend.reads == 2 and backend.most_at_once == 1
        assert health.timeouts == 1 and [r.getMessage() for r in caplog.records] == [TIMED_OUT]


def test_when_the_hung_read_returns_the_next_scrape_collects_afresh(caplog):
    caplog.set_level(logging.WARNING, logger="exporters.health")
    backend = Backend()
    with exporter(backend) as (clock, waits, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        assert scrape(server.port)[0] == 200
        clock.now += 4.5
        unhang(backend, health)
        clock.now += 5
        code, text = scrape(server.port)
        assert code == 200 and values(text) == {"DCGM_FI_DEV_GPU_TEMP": 42.0,
                                                "gputide_exporter_collect_timeouts_total": 1.0,
                                                "gputide_exporter_collection_age_seconds": 0.0}
        assert waits.timeouts == [TIMEOUT_S, TIMEOUT_S, 0.0, TIMEOUT_S] and backend.reads == 3
        assert [r.getMessage() for r in caplog.records] == [
            TIMED_OUT, "the collection that outran the 0.5 s timeout ended after 5.0 s"]


def test_readyz_says_not_ready_while_a_collection_outruns_the_timeout_and_healthz_waits_for_stuck_after():
    backend = Backend()
    with exporter(backend) as (clock, waits, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        assert get(server.port, "/readyz") == (200, "ok: a collection has been running for 0 s\n")   # 0.5 s: not over
        clock.now += 8.5
        assert get(server.port, "/readyz") == (503, "not ready: a collection has been running for 9 s "
                                                    "(timeout 0.5 s)\n")
        assert get(server.port, "/healthz") == (200, "ok: a collection has been running for 9 s\n")
        unhang(backend, health)
        assert get(server.port, "/readyz") == (200, "ok: the last collection ended 0 s ago\n")


def test_two_scrapes_at_once_share_one_read():
    backend = Backend()
    backend.hang = True
    with exporter(backend, timeout_s=BOUND_S, expire=False) as (clock, waits, health, server):
        results: list[tuple[int, str]] = []
        threads = [threading.Thread(target=lambda: results.append(scrape(server.port))) for _ in range(2)]
        for t in threads:
            t.start()
        # Release the read only once both scrapes wait for a collection: the running one, which cannot end before.
        # Released earlier, it could end before the second scrape looked, which would then start its own.
        assert waits.began[1].wait(BOUND_S), "the two scrapes did not both wait for a collection"
        assert waits.events[0] is waits.events[1] and not waits.events[0].is_set()
        backend.release.set()
        for t in threads:
            t.join(BOUND_S)
        assert [r[0] for r in results] == [200, 200] and results[0][1] == results[1][1]
        assert backend.reads == 1 and health.timeouts == 0


def test_a_hung_first_collection_is_the_one_scrapes_wait_for(caplog):
    caplog.set_level(logging.WARNING, logger="exporters.health")
    backend = Backend()
    backend.hang = True
    with exporter(backend) as (clock, waits, health, server):
        first_collection(TrackedCollector(GpuCollector(backend), health)).join(BOUND_S)
        assert backend.entered.wait(BOUND_S)
        assert scrape(server.port) == (503, "collection timed out: one has been running for 0 s (timeout 0.5 s) and "
                                            "none has completed (served for up to 30 s)\n")
        assert waits.timeouts == [TIMEOUT_S, 0.0] and waits.events[1] is waits.events[0]
        assert get(server.port, "/readyz") == (503, "not ready: no collection has succeeded yet\n")
        assert backend.reads == 1 and health.timeouts == 1
        assert [r.getMessage() for r in caplog.records] == [
            TIMED_OUT, "the first collection has outrun the collection timeout; the exporter is ready once it ends"]


def test_outside_tests_a_scrape_waits_on_the_collections_event_in_real_time():
    assert CollectHealth().wait is threading.Event.wait
