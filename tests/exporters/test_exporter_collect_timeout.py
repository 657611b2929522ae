"""A hung NVML call (a GPU falling off the bus) made every later scrape wait behind it until the process was
restarted, one more blocked thread each. Collections now run one at a time in a thread of their own, a scrape waits
for at most the collection timeout, then gets the last complete exposition while it is recent enough, else a 503;
no second NVML read starts while one hangs, the timeout is counted, and /readyz says not ready meanwhile."""

from __future__ import annotations

import threading
import time
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
TIMEOUT_S = 0.3   # the collection timeout here (8 s by default)


class Backend:
    """Reads GPU temperatures 40, 41, 42 ...; `hang` makes a read wait until `release` is set; counts the reads
    and the most that ran at once."""

    identity = (GPU,)

    def __init__(self, slow_s: float = 0.0) -> None:
        self.reads = self.running = self.most_at_once = 0
        self.slow_s = slow_s
        self.hang = False
        self.entered, self.release = threading.Event(), threading.Event()
        self._lock = threading.Lock()

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
            time.sleep(self.slow_s)
            return GpuReadings(identity=self.identity, values={"DCGM_FI_DEV_GPU_TEMP": np.array([temp])})
        finally:
            with self._lock:
                self.running -= 1


@contextmanager
def exporter(backend: Backend, serve_stale_s: float = 30.0) -> Iterator[tuple[Clock, CollectHealth, Any]]:
    """(clock, health, server) of an exporter on `backend`; on leaving, a hung read is released and the server
    closed, whatever the test asserted."""
    clock = Clock()
    health = CollectHealth(clock=clock, collect_timeout_s=TIMEOUT_S, serve_stale_s=serve_stale_s)
    server = serve(GpuCollector(backend), port=0, health=health)
    try:
        yield clock, health, server
    finally:
        backend.release.set()
        server.close()


def scrape(port: int) -> tuple[int, str, float]:
    start = time.monotonic()
    code, text = get(port, "/metrics")
    return code, text, time.monotonic() - start


def values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith(("DCGM_FI_DEV_GPU_TEMP", "gputide_exporter_collect"))}


def hang(backend: Backend, port: int) -> threading.Thread:
    """A scrape whose read hangs, left waiting in the background."""
    backend.hang = True
    t = threading.Thread(target=get, args=(port, "/metrics"), daemon=True)
    t.start()
    assert backend.entered.wait(5)
    return t


def unhang(backend: Backend, health: CollectHealth) -> None:
    """The hung read returns, and its collection ends (the scrape that started it gave up on it long ago)."""
    before = health.last_complete
    backend.hang = False
    backend.release.set()
    deadline = time.monotonic() + 10
    while health.last_complete is before:
        assert time.monotonic() < deadline, "the released collection did not end within 10 s"
        time.sleep(0.01)


def test_a_scrape_behind_a_hung_read_gets_the_last_complete_exposition_within_the_timeout():
    backend = Backend()
    with exporter(backend) as (clock, health, server):
        code, text, _ = scrape(server.port)
        assert code == 200 and values(text)["gputide_exporter_collect_timeouts_total"] == 0
        hang(backend, server.port)
        code, text, took = scrape(server.port)
        assert code == 200 and took < TIMEOUT_S + 1.5, took
        assert values(text) == {"DCGM_FI_DEV_GPU_TEMP": 40.0, "gputide_exporter_collect_timeouts_total": 1.0,
                                "gputide_exporter_collection_age_seconds": 0.0}
        clock.now += 20
        code, text, took = scrape(server.port)   # the same hung collection: counted once, answered at once
        assert code == 200 and took < 1.0, took
        assert values(text) == {"DCGM_FI_DEV_GPU_TEMP": 40.0, "gputide_exporter_collect_timeouts_total": 1.0,
                                "gputide_exporter_collection_age_seconds": 20.0}
        assert backend.reads == 2 and backend.most_at_once == 1   # no second read beside the hung one


def test_once_the_last_complete_exposition_is_too_old_a_scrape_fails_clearly_and_still_at_once():
    backend = Backend()
    with exporter(backend, serve_stale_s=30.0) as (clock, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        clock.now += 31
        code, text, took = scrape(server.port)
        assert code == 503 and took < 1.0, took
        assert text == ("collection timed out: one has been running for 31 s (timeout 0.3 s) and the last complete "
                        "one began 31 s ago (served for up to 30 s)\n")
        assert backend.reads == 2


def test_scrapes_piling_up_behind_a_hung_read_start_no_other_read_and_each_returns():
    backend = Backend()
    with exporter(backend) as (clock, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        results: list[tuple[int, str, float]] = []
        threads = [threading.Thread(target=lambda: results.append(scrape(server.port))) for _ in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(10)
        assert len(results) == 8 and {r[0] for r in results} == {200}
        assert max(r[2] for r in results) < TIMEOUT_S + 1.5
        assert backend.reads == 2 and backend.most_at_once == 1
        assert health.timeouts == 1


def test_when_the_hung_read_returns_the_next_scrape_collects_afresh():
    backend = Backend()
    with exporter(backend) as (clock, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        assert scrape(server.port)[0] == 200
        unhang(backend, health)
        clock.now += 5
        code, text, _ = scrape(server.port)
        assert code == 200 and values(text) == {"DCGM_FI_DEV_GPU_TEMP": 42.0,
                                                "gputide_exporter_collect_timeouts_total": 1.0,
                                                "gputide_exporter_collection_age_seconds": 0.0}
        assert backend.reads == 3


def test_readyz_says_not_ready_while_a_collection_outruns_the_timeout_and_healthz_waits_for_stuck_after():
    backend = Backend()
    with exporter(backend) as (clock, health, server):
        assert scrape(server.port)[0] == 200
        hang(backend, server.port)
        assert get(server.port, "/readyz")[0] == 200   # within the timeout: a read in progress
        clock.now += 9
        assert get(server.port, "/readyz") == (503, "not ready: a collection has been running for 9 s "
                                                    "(timeout 0.3 s)\n")
        assert get(server.port, "/healthz") == (200, "ok: a collection has been running for 9 s\n")
        unhang(backend, health)
        assert get(server.port, "/readyz")[0] == 200


class CountingLock:
    """A lock that counts the times it was let go."""

    def __init__(self) -> None:
        self._lock, self.released = threading.Lock(), 0

    def __enter__(self) -> CountingLock:
        self._lock.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.released += 1
        self._lock.release()


class CountingHealth(CollectHealth):
    """Counts the scrapes that hold the collection they will wait for: `run` lets go of `_runs` once it has taken the
    running collection or started one (`_collect` and `_instead_of` take it too, but only once a collection has
    ended or outrun its timeout)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._runs = CountingLock()

    @property
    def holding(self) -> int:
        return self._runs.released


def test_two_scrapes_at_once_share_one_read():
    backend = Backend()
    backend.hang = True
    health = CountingHealth(clock=Clock(), collect_timeout_s=10.0)
    server = serve(GpuCollector(backend), port=0, health=health)
    try:
        results: list[tuple[int, str, float]] = []
        threads = [threading.Thread(target=lambda: results.append(scrape(server.port))) for _ in range(2)]
        for t in threads:
            t.start()
        # Release the read only once both scrapes hold the collection they wait for, the running one (it cannot end
        # before): released earlier, it could end before the second scrape looked, which would then start its own.
        deadline = time.monotonic() + 10
        while health.holding < 2:
            assert time.monotonic() < deadline, "the two scrapes did not both reach the collection within 10 s"
            time.sleep(0.01)
        backend.release.set()
        for t in threads:
            t.join(10)
        assert [r[0] for r in results] == [200, 200] and results[0][1] == results[1][1]
        assert backend.reads == 1
    finally:
        backend.release.set()
        server.close()


def test_a_hung_first_collection_is_the_one_scrapes_wait_for():
    backend = Backend()
    backend.hang = True
    with exporter(backend) as (clock, health, server):
        first_collection(TrackedCollector(GpuCollector(backend), health))
        assert backend.entered.wait(5)
        code, text, took = scrape(server.port)
        assert code == 503 and took < TIMEOUT_S + 1.5
        assert text == ("collection timed out: one has been running for 0 s (timeout 0.3 s) and none has completed "
                        "(served for up to 30 s)\n")
        assert get(server.port, "/readyz") == (503, "not ready: no collection has succeeded yet\n")
        assert backend.reads == 1
