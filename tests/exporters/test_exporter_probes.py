"""The exporter's probes: the DaemonSet's liveness and readiness probes asked for /metrics, so every probe ran a
whole NVML read, and an NVML call that never returned made the probes time out behind it. /healthz and /readyz
now answer from what the collections did (exporters/health.py), served by the real server, and read nothing."""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from balancer.cli import main
from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.collector import GpuCollector
from exporters.health import CollectHealth, TrackedCollector, first_collection
from exporters.server import serve
from tests.cli.test_cli_health import Clock, get  # the controller's probes are asked the same way

ROOT = Path(__file__).resolve().parents[2]
GPU = GpuIdentity("0", "GPU-0", "00000000:01:00.0", "nvidia0", "NVIDIA H100", "node-a")


class Backend:
    """A backend that counts its reads; `hang` makes the next read wait until `release` is set, `fail` raise."""

    identity = (GPU,)

    def __init__(self) -> None:
        self.reads = 0
        self.hang, self.fail = False, False
        self.entered, self.release = threading.Event(), threading.Event()

    def read(self) -> GpuReadings:
        self.reads += 1
        if self.fail:
            raise RuntimeError("NVML: GPU is lost")
        if self.hang:
            self.entered.set()
            self.release.wait(10)
        return GpuReadings(identity=self.identity, values={"DCGM_FI_DEV_GPU_TEMP": np.array([40.0])})


def exporter(stuck_after_s: float = 300.0):
    backend, clock = Backend(), Clock()
    health = CollectHealth(stuck_after_s, clock=clock)
    return backend, clock, health, serve(GpuCollector(backend), port=0, health=health)


def ended(health: CollectHealth, before: object, timeout_s: float = 10.0) -> None:
    """Wait until a collection after `before` (`health.last_complete` then) has ended: the hung one's thread, which
    no scrape waits for once it has outrun the collection timeout."""
    deadline = time.monotonic() + timeout_s
    while health.last_complete is before:
        assert time.monotonic() < deadline, f"the released collection did not end within {timeout_s} s"
        time.sleep(0.01)


def test_probes_answer_from_the_collections_and_never_read_the_backend():
    backend, clock, _, server = exporter()
    try:
        for _ in range(5):
            assert get(server.port, "/healthz") == (200, "ok: no collection has run yet\n")
            code, text = get(server.port, "/readyz")
            assert (code, text) == (503, "not ready: no collection has succeeded yet\n")
        assert backend.reads == 0
        assert get(server.port, "/metrics")[0] == 200
        assert backend.reads == 1
        clock.now += 42
        for _ in range(5):
            assert get(server.port, "/healthz") == (200, "ok: the last collection ended 42 s ago\n")
            assert get(server.port, "/readyz") == (200, "ok: the last collection ended 42 s ago\n")
        assert backend.reads == 1
    finally:
        server.close()


def test_a_collection_that_never_returns_fails_liveness_after_the_limit_and_the_probes_still_answer():
    backend, clock, health, server = exporter(stuck_after_s=300.0)
    try:
        assert get(server.port, "/metrics")[0] == 200
        backend.hang = True
        scrape = threading.Thread(target=get, args=(server.port, "/metrics"), daemon=True)
        scrape.start()
        assert backend.entered.wait(5)
        clock.now += 299
        assert get(server.port, "/healthz") == (200, "ok: a collection has been running for 299 s\n")
        # not stuck yet, but past the collection timeout: not ready (tests/exporters/test_exporter_collect_timeout.py)
        assert get(server.port, "/readyz") == (
            503, "not ready: a collection has been running for 299 s (timeout 8 s)\n")
        clock.now += 2
        stuck = "stuck: a collection has been running for 301 s (limit 300 s)\n"
        assert get(server.port, "/healthz") == (503, stuck)
        assert get(server.port, "/readyz") == (503, stuck)
        assert backend.reads == 2   # the probes asked nothing of the hung backend
        before = health.last_complete
        backend.hang = False
        backend.release.set()
        scrape.join(5)
        # The scrape may have given up on the hung collection before it was released (past the collection timeout,
        # which the fake clock's jump can put behind it at once): its end says nothing of the collection's.
        ended(health, before)
        assert get(server.port, "/healthz")[0] == 200
    finally:
        backend.release.set()
        server.close()


def test_ready_only_once_a_collection_has_succeeded():
    backend, clock, _, server = exporter()
    try:
        backend.fail = True
        assert get(server.port, "/metrics")[0] == 500
        assert get(server.port, "/readyz") == (
            503, "not ready: no collection has succeeded yet (the last one failed)\n")
        assert get(server.port, "/healthz")[0] == 200   # a failing read is not stuck: the next scrape tries again
        backend.fail = False
        assert get(server.port, "/metrics")[0] == 200
        assert get(server.port, "/readyz")[0] == 200
    finally:
        server.close()


def test_the_first_collection_makes_the_exporter_ready_without_a_scrape():
    backend, health = Backend(), CollectHealth()
    first_collection(TrackedCollector(GpuCollector(backend), health)).join(5)
    assert backend.reads == 1 and health.ready()[0]
    backend.fail = True
    health = CollectHealth()
    first_collection(TrackedCollector(GpuCollector(backend), health)).join(5)   # logged, not raised
    assert not health.ready()[0]


def test_gputide_exporter_serves_the_probes_and_is_ready_before_any_scrape():
    proc = subprocess.Popen([sys.executable, "-m", "balancer.cli", "exporter", "--backend", "sim", "--port", "0",
                             "--listen", "127.0.0.1", "--duration", "60"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        port = int(re.search(r":(\d+)/metrics", line).group(1))
        deadline = time.monotonic() + 30
        while get(port, "/readyz")[0] != 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert get(port, "/readyz")[0] == 200
        code, text = get(port, "/healthz")
        assert code == 200 and text.startswith("ok: the last collection ended"), text
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_stuck_after_is_a_duration_of_at_least_ten_seconds(capsys):
    assert main(["exporter", "--port", "0", "--duration", "0.1", "--stuck-after", "1s"]) == 2
    assert "--stuck-after" in capsys.readouterr().err
