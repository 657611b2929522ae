"""Liveness and readiness of `gputide run`, served beside `/metrics` on the metrics port.

The metrics server answers from its own thread, so a probe on `/metrics` says only that the process is up: a
reconcile loop stuck in a call that never returns would be probed healthy forever, and no action would be taken
again until a person noticed `GputideControllerNotReconciling`. The loop therefore beats once per iteration,
whatever its result (ok, fail-static, standby, error), and marks progress as its housekeeping and each action
begin, and

* `/healthz` (liveness) answers 200 while the loop last moved (an iteration ended, an action began) less than
  `stall_after_s` ago (before that: since the process started), 503 with the age otherwise, so the kubelet
  restarts a stuck controller;
* `/readyz` (readiness) answers 200 once an iteration has ended and the loop is not stalled.

A healthy loop must never look stuck, or the kubelet kills it in the middle of an action: `stall_limit` is the
longest it may legitimately go without moving, from the actuator's action deadline (every API call of an action
ends within it) rather than from retry arithmetic, so a loop stuck in a call is restarted within minutes.

Every other path is prometheus_client's own exposition of the controller's registry (`make_wsgi_app`).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Protocol

from prometheus_client import CollectorRegistry, disable_created_metrics, make_wsgi_app

from balancer.actuate.k8s_leader import STOPPED_SAVE_RETRIES, TAKEOVER_CONFLICT_RETRIES
from exporters.server import RunningServer, serve_app

# ---- how long one action may take ------------------------------------------------------------------------------

# The safety ledger onto the Lease: a renewal in flight, then ours, each a read and a write and, after a 409 for an
# edit of the Lease's metadata alone, up to TAKEOVER_CONFLICT_RETRIES re-reads and writes again (16 calls).
LEASE_CALLS_AFTER_ACTING = 2 * 2 * (1 + TAKEOVER_CONFLICT_RETRIES)
# After SIGTERM: the renewal in flight ends at its 409 (a read and a write); the exit's ledger save writes again
# STOPPED_SAVE_RETRIES more times after one (6 calls).
LEASE_CALLS_AFTER_STOP = 2 + 2 * (1 + STOPPED_SAVE_RETRIES)
# On the way out: a renewal in flight again (a read and a write), then the release's read and write that clears the
# holder, which after a 409 for a metadata edit writes again STOPPED_SAVE_RETRIES more times, as the save (6 calls).
LEASE_CALLS_TO_RELEASE = 2 + 2 * (1 + STOPPED_SAVE_RETRIES)


class Retries(Protocol):
    """What the gateway's `_Api` (balancer/actuate/kubernetes.py) retries a call with."""

    max_retries: int
    backoff_s: float
    timeout_s: float


def call_budget_s(api: Retries | None) -> float:
    """The longest one API call through `api` can take outside a deadline: every try to the request timeout, with
    the backoff between them; 0 without an API (a dry run, no Lease)."""
    if api is None:
        return 0.0
    tries = api.max_retries + 1
    return tries * api.timeout_s + sum(api.backoff_s * 2**i for i in range(tries - 1))


def action_budget_s(action_deadline_s: float, lease_api: Retries | None = None) -> float:
    """The longest one action keeps the loop from its next step: its deadline (every API call it makes, its undo and
    Event included, ends within it: balancer/actuate/k8s_budget.py), then the safety ledger written to the Lease.
    0 for an actuator without a deadline (a dry run makes no call)."""
    return action_deadline_s + LEASE_CALLS_AFTER_ACTING * call_budget_s(lease_api)


def stop_budget_s(action_deadline_s: float, lease_api: Retries | None) -> float:
    """How long `gputide run` may take from SIGTERM to exit: the action in progress finishes (its deadline), the
    ledger is written to the Lease with SIGTERM's fewer retries (`LEASE_CALLS_AFTER_STOP`), then the Lease is
    released. The controller's terminationGracePeriodSeconds must exceed it by about 10 s (the steps between the
    Lease calls and the interpreter's exit), or the kubelet kills it mid-action with the Lease held
    (tests/deploy/test_deploy_grace_period.py)."""
    return action_deadline_s + (LEASE_CALLS_AFTER_STOP + LEASE_CALLS_TO_RELEASE) * call_budget_s(lease_api)


def stall_limit(interval_s: float, action_s: float = 0.0) -> float:
    """How long the loop may go without moving before it counts as stuck: from an iteration's end, through the
    wait and the next cycle's reads, to its housekeeping (or its end), five intervals and at least 5 minutes (a slow
    Prometheus); from the start of housekeeping or of an action to the next one's or the cycle's end, `action_s`
    (`action_budget_s`: an action's deadline, then the safety ledger's Lease write). Only a loop that never
    returns is stuck."""
    return max(5.0 * interval_s, 300.0, action_s)


class Health:
    """The loop's heartbeats (`beat()` after every iteration, `progress()` as each action begins) and what the
    probes make of them. `gputide schedule` beats after every pass and marks progress as each pod's turn begins."""

    def __init__(self, stall_after_s: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.stall_after_s, self.clock = stall_after_s, clock
        self.started = clock()
        self.last: float | None = None    # the last iteration's end
        self.moved: float | None = None   # the last heartbeat of either kind
        self.moving = "no iteration has ended since the start"

    def beat(self) -> None:
        self.last = self.moved = self.clock()
        self.moving = "the last iteration ended"

    def progress(self, what: str = "the last action") -> None:
        """`what` (an action, housekeeping, a scheduler's pod) began: the loop is moving."""
        self.moved = self.clock()
        self.moving = f"{what} began"

    def live(self) -> tuple[bool, str]:
        since = self.clock() - (self.started if self.moved is None else self.moved)
        if since > self.stall_after_s:
            return False, f"stalled: {self.moving} {since:.0f} s ago (limit {self.stall_after_s:.0f} s)"
        return True, f"ok: {self.moving} {since:.0f} s ago"

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
    """Serve /metrics, /healthz and /readyz from a daemon thread (`.port`, `.close()`). The process's counters and
    histograms carry no `_created` series (prometheus-client's per-series creation time: 127 of the controller's
    289 samples, read by nothing; the exporter and the power-cap agent leave them out too)."""
    disable_created_metrics()   # process-wide: this process serves this registry and no other
    return serve_app(app(health, registry), port=port, addr=addr, name="gputide-metrics")
