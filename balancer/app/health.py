"""Liveness and readiness of `gputide run`, served beside `/metrics` on the metrics port.

The metrics server answers from its own thread, so a probe on `/metrics` says only that the process is up: a
reconcile loop stuck in a call that never returns would be probed healthy forever, and no action would be taken
again until a person noticed `GputideControllerNotReconciling`. The loop therefore beats once per iteration,
whatever its result (ok, fail-static, standby, error), and

* `/healthz` (liveness) answers 200 while the last iteration ended less than `stall_after_s` ago (before the
  first one: since the process started), 503 with the age otherwise, so the kubelet restarts a stuck controller;
* `/readyz` (readiness) answers 200 once an iteration has ended and the loop is not stalled.

Every other path is prometheus_client's own exposition of the controller's registry (`make_wsgi_app`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from prometheus_client import CollectorRegistry, make_wsgi_app

from exporters.server import RunningServer, serve_app


def stall_limit(interval_s: float) -> float:
    """How long an iteration may take before the controller counts as stuck: five intervals, at least 5 minutes
    (one cycle may wait on Prometheus and retry API calls for minutes; only a loop that never returns is stuck)."""
    return max(5.0 * interval_s, 300.0)


class Health:
    """The loop's heartbeat (`beat()` after every iteration) and what the probes make of it."""

    def __init__(self, stall_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after_s, self.clock = stall_after_s, clock
        self.started = clock()
        self.last: float | None = None

    def beat(self) -> None:
        self.last = self.clock()

    def live(self) -> tuple[bool, str]:
        since = self.clock() - (self.started if self.last is None else self.last)
        what = "no iteration has ended since the start" if self.last is None else "the last iteration ended"
        if since > self.stall_after_s:
            return False, f"stalled: {what} {since:.0f} s ago (limit {self.stall_after_s:.0f} s)"
        return True, f"ok: {what} {since:.0f} s ago"

    def ready(self) -> tuple[bool, str]:
        if self.last is None:
            return False, "not ready: no iteration has ended yet"
        return self.live()


def app(health: Health, registry: CollectorRegistry) -> Callable[..., Iterable[bytes]]:
    metrics = make_wsgi_app(registry)
    probes = {"/healthz": health.live, "/readyz": health.ready}

    def dispatch(environ, start_response):
        probe = probes.get(environ.get("PATH_INFO", "/"))
        if probe is None:
            return metrics(environ, start_response)
        ok, text = probe()
        body = (text + "\n").encode()
        start_response("200 OK" if ok else "503 Service Unavailable",
                       [("Content-Type", "text/plain; charset=utf-8"), ("Content-Length", str(len(body)))])
        return [body]

    return dispatch


def serve(port: int, registry: CollectorRegistry, health: Health, addr: str = "0.0.0.0") -> RunningServer:
    """Serve /metrics, /healthz and /readyz from a daemon thread (`.port`, `.close()`)."""
    return serve_app(app(health, registry), port=port, addr=addr, name="gputide-metrics")
