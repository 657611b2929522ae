"""`gputide run`'s probes: /healthz fails when the reconcile loop is stuck, /readyz once an iteration has ended,
/metrics is still the controller's registry; all over real HTTP, the stuck loop a real thread blocked in a call."""

from __future__ import annotations

import threading
import time
import urllib.error
import urllib.request

import pytest
from prometheus_client import CollectorRegistry

from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.app.health import Health, action_budget_s, serve, stall_limit
from balancer.cmd.run import lease_elector
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Plan, TaintNode
from tests.loop.loop_helpers import make_fleet, snapshot


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


def test_the_stall_limit_never_falls_below_the_longest_action():
    assert stall_limit(30.0, action_s=420.0) == 420.0 and stall_limit(600.0, action_s=420.0) == 3000.0


def test_an_action_beginning_keeps_the_loop_live_but_does_not_make_it_ready():
    clock = Clock()
    health = Health(stall_after_s=300.0, clock=clock)
    clock.now += 299
    health.progress()
    clock.now += 299
    assert health.live() == (True, "ok: the last action began 299 s ago")
    assert health.ready() == (False, "not ready: no iteration has ended yet")
    clock.now += 2
    assert health.live() == (False, "stalled: the last action began 301 s ago (limit 300 s)")


class SlowActuator:
    """Each action takes `seconds` on the probe's clock (up to its deadline), and the liveness probe is asked as it
    ends; the cycle's last action stops the loop."""

    def __init__(self, clock: Clock, health: Health, seconds: float, stop: threading.Event, count: int) -> None:
        self.clock, self.health, self.seconds, self.stop, self.count = clock, health, seconds, stop, count
        self.live: list[bool] = []

    def apply(self, action, snap):
        self.clock.now += self.seconds
        self.live.append(self.health.live()[0])
        if len(self.live) == self.count:
            self.stop.set()
        return ActionResult(action, Outcome.APPLIED)


def worst_cycle(seconds_per_action: float) -> list[bool]:
    """`gputide run`'s loop and probe as it wires them, for a `--leader-elect` controller at 30 s: a cycle of three
    actions of `seconds_per_action` each; what the probe said as each ended."""
    snap = snapshot(make_fleet(3, 4), age=0.0)
    actions = tuple(TaintNode(node=f"n{i}", reason="hot", expected_gain=1.0) for i in range(3))

    class Source:
        def snapshot(self):
            return snap

    clock, stop = Clock(), threading.Event()
    lease = lease_elector(None, "gputide-controller", "gputide", 30.0).api
    health = Health(stall_limit(30.0, action_budget_s(KubernetesActuator(None).action_deadline_s, lease)), clock=clock)
    actuator = SlowActuator(clock, health, seconds_per_action, stop, len(actions))
    rec = Reconciler(source=Source(), actuator=actuator, clock=lambda: snap.time, metrics=ControllerMetrics(
        CollectorRegistry()), planner=lambda s, f, p, st: (Plan(actions=actions), st))
    rec.run(0.0, stop, beat=health.beat, progress=health.progress)
    return actuator.live


def test_a_cycle_of_actions_each_at_its_deadline_stays_live_and_a_loop_stuck_in_one_does_not():
    """An action ends within its deadline (3 minutes, undo and Event included), then the ledger's Lease write takes
    at most 80 s (a renewal in flight and the save, each retried after a metadata-only 409): 260 s, so at 30 s the
    limit is the 5-minute floor (977 s when it was derived from every call's
    retries). A cycle of three such actions (10 minutes) is moving, each beginning with a heartbeat; a call stuck
    past 5 minutes is not."""
    worst = action_budget_s(KubernetesActuator(None).action_deadline_s, lease_elector(None, "l", "ns", 30.0).api)
    assert worst == 260.0 and stall_limit(30.0, worst) == 300.0
    assert worst_cycle(worst) == [True, True, True]
    assert worst_cycle(301.0) == [False, False, False]


def test_housekeeping_beginning_is_a_heartbeat_too():
    """The actuator's housekeeping (expired taints and reservations released) runs to an action's deadline, after
    the cycle's telemetry reads: the two together may outlast the 5-minute floor, and the loop is moving."""
    snap = snapshot(make_fleet(3, 4), age=0.0)
    clock, stop, said = Clock(), threading.Event(), []
    health = Health(300.0, clock=clock)

    class Source:
        def snapshot(self):
            clock.now += 150.0   # a slow Prometheus
            return snap

    class Actuator:
        def apply(self, action, snap):
            return ActionResult(action, Outcome.APPLIED)

        def housekeeping(self):
            clock.now += 200.0   # a slow API server, up to the deadline
            said.append(health.live())
            stop.set()
            return []

    rec = Reconciler(source=Source(), actuator=Actuator(), clock=lambda: snap.time, metrics=ControllerMetrics(
        CollectorRegistry()), planner=lambda s, f, p, st: (Plan(actions=()), st))
    rec.run(0.0, stop, beat=health.beat, progress=health.progress)
    assert said == [(True, "ok: housekeeping began 200 s ago")]


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
    """The real loop in a thread: two iterations beat, then its telemetry source blocks forever. The probe's time is
    the test's clock: on the real one a main thread scheduled a second after the loop's last beat (2 loaded cores)
    read /healthz stalled already, where the test wants it live."""
    release, calls, clock = threading.Event(), [], Clock()

    class Source:
        def snapshot(self):
            calls.append(1)
            if len(calls) > 2:
                release.wait()      # a call with no timeout that never returns
            raise RuntimeError("no telemetry")   # an iteration that errs still ends, and beats

    registry = CollectorRegistry()
    rec = Reconciler(source=Source(), actuator=None, metrics=ControllerMetrics(registry))
    health = Health(stall_after_s=1.0, clock=clock)
    server = serve(0, registry, health, addr="127.0.0.1")
    stop = threading.Event()
    loop = threading.Thread(target=rec.run, args=(0.05, stop), kwargs={"beat": health.beat}, daemon=True)
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while len(calls) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(calls) == 3, "the loop did not reach its third iteration"   # blocked in it: no beat follows
        assert get(server.port, "/healthz")[0] == 200 and health.last == clock.now
        clock.now += 2.0
        assert get(server.port, "/healthz") == (503, "stalled: the last iteration ended 2 s ago (limit 1 s)\n")
    finally:
        stop.set()
        release.set()
        loop.join(5)
        server.close()


def test_gputide_run_gives_its_probe_the_deadline_of_the_actuator_it_built(monkeypatch):
    """`gputide run` sizes the stall limit from its own actuator's action deadline, not a constant."""
    import argparse

    from balancer.cmd import run as run_cmd
    from balancer.errors import TelemetryError

    class Source:
        def snapshot(self):
            raise TelemetryError("no telemetry")

    class Actuator:   # the Kubernetes actuator's deadline, with nothing to recover
        action_deadline_s = KubernetesActuator(None, action_deadline_s=420.0).action_deadline_s

    limits = []
    monkeypatch.setattr(run_cmd, "Health", lambda stall_after_s: limits.append(stall_after_s) or Health(stall_after_s))
    monkeypatch.setattr(run_cmd, "build_reconciler", lambda args, metrics: Reconciler(
        source=Source(), actuator=Actuator(), metrics=metrics))
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--once", "--metrics-port", "0"])
    assert run_cmd.run(args) == 3   # held still: no telemetry
    assert limits == [420.0]   # no Lease: the deadline alone
