"""`gputide run`'s probes: /healthz fails when the reconcile loop is stuck, /readyz once an iteration has ended,
/metrics is still the controller's registry; all over real HTTP, the stuck loop a real thread blocked in a call."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from balancer.app.health import Health, serve, stall_limit
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


def test_liveness_allows_a_slow_start_then_fails_when_no_iteration_ends_within_the_limit():
    clock = Clock()
    health = Health(stall_after_s=300.0, clock=clock)
    clock.now += 299
    assert health.live()[0] is True and health.ready() == (False, "not ready: no iteration has ended yet")
    clock.now += 2
    assert health.live() == (False, "stalled: no iteration has ended since the start 301 s ago (limit 300 s)")
    health.beat()
    clock.now += 30
    assert health.live() == (True, "ok: the last iteration ended 30 s ago") and health.ready()[0] is True
    clock.now += 271
    assert health.live()[0] is False and health.ready()[0] is False


@pytest.mark.parametrize(("interval", "limit"), [(30.0, 300.0), (60.0, 300.0), (120.0, 600.0)])
def test_the_stall_limit_is_five_intervals_and_never_under_five_minutes(interval, limit):
    assert stall_limit(interval) == limit


def test_probes_and_metrics_over_http():
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    clock = Clock()
    health = Health(stall_after_s=60.0, clock=clock)
    server = serve(0, registry, health, addr="127.0.0.1")
    try:
        port = server.port
        assert get(port, "/healthz")[0] == 200
        assert get(port, "/readyz") == (503, "not ready: no iteration has ended yet\n")
        health.beat()
        assert get(port, "/readyz")[0] == 200
        status, body = get(port, "/metrics")
        assert status == 200 and "gputide_reconcile_total" in body
        clock.now += 61
        assert get(port, "/healthz") == (503, "stalled: the last iteration ended 61 s ago (limit 60 s)\n")
    finally:
        server.close()


def test_a_loop_stuck_in_a_call_that_never_returns_fails_liveness():
    """The real loop in a thread: two iterations beat, then its telemetry source blocks forever."""
    release, calls = threading.Event(), []

    class Source:
        def snapshot(self):
            calls.append(1)
            if len(calls) > 2:
                release.wait()      # a call with no timeout that never returns
            raise RuntimeError("no telemetry")   # an iteration that errs still ends, and beats

    registry = CollectorRegistry()
    rec = Reconciler(source=Source(), actuator=None, metrics=ControllerMetrics(registry))
    health = Health(stall_after_s=1.0)
    server = serve(0, registry, health, addr="127.0.0.1")
    stop = threading.Event()
    loop = threading.Thread(target=rec.run, args=(0.05, stop), kwargs={"beat": health.beat}, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 10
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert get(server.port, "/healthz")[0] == 200 and health.last is not None
        while get(server.port, "/healthz")[0] == 200 and time.monotonic() < deadline:
            time.sleep(0.1)
        status, body = get(server.port, "/healthz")
        assert status == 503 and body.startswith("stalled: the last iteration ended"), body
    finally:
        stop.set()
        release.set()
        loop.join(5)
        server.close()
