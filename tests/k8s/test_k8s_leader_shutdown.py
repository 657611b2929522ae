"""`gputide run --leader-elect` receiving SIGTERM (a rollout, a drain) while it applies an action: it finishes that
action, applies none of the rest, releases the Lease (so a standby takes over at once, not after 90 s) and exits 0.
The signal is real (raised inside the action, handled by run's own handler); nothing here waits on wall time."""

from __future__ import annotations

import argparse
import signal

import pytest
from fakeapi import FakeKube
from prometheus_client import CollectorRegistry

from balancer.actuate.base import ActionResult, Outcome
from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.cmd import run as run_cmd
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Plan, TaintNode
from tests.loop.loop_helpers import make_fleet, snapshot

ACTIONS = tuple(TaintNode(node=f"n{i}", reason="hot", expected_gain=1.0) for i in range(3))


@pytest.fixture
def own_signal_handlers():
    """run() installs SIGTERM / SIGINT handlers; the test process gets its own back afterwards."""
    saved = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for s, handler in saved.items():
        signal.signal(s, handler)


class SigtermDuringFirstAction:
    name = "test"

    def __init__(self) -> None:
        self.calls = []

    def apply(self, action, snap):
        self.calls.append(action)
        if len(self.calls) == 1:
            signal.raise_signal(signal.SIGTERM)   # the kubelet stops the pod while this call is in flight
        return ActionResult(action, Outcome.APPLIED)


def gputide_run(monkeypatch, api, clock, actuator, actions, registry, *flags):
    """`run_cmd.run` on the argv `run --leader-elect *flags`, its reconciler planning `actions` on a fixed snapshot,
    acting through `actuator` and electing on the fake API server's Lease: (exit code, the elector)."""
    snap = snapshot(make_fleet(3, 4), age=0.0)

    class Source:
        def snapshot(self):
            return snap

    elector = run_cmd.lease_elector(api, "gputide-controller", "gputide", 30.0)
    elector.identity, elector.clock = "replica-a", clock
    rec = Reconciler(source=Source(), actuator=actuator, elector=elector, clock=lambda: snap.time,
                     metrics=ControllerMetrics(registry), planner=lambda s, f, p, st: (Plan(actions=actions), st))
    monkeypatch.setattr(run_cmd, "build_reconciler", lambda args, metrics: rec)
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    args = parser.parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--leader-elect", "--metrics-port", "0",
                              *flags])
    return run_cmd.run(args), elector


def a_standby_takes_over_at_once(api, clock) -> bool:
    standby = LeaseLeaderElector(api, "gputide-controller", "gputide", "replica-b", lease_duration_s=90,
                                 renew_deadline_s=60, clock=clock)
    return standby.try_acquire_or_renew()


def test_sigterm_mid_action_finishes_it_skips_the_rest_and_releases_the_lease(kube: FakeKube, api, clock,
                                                                              monkeypatch, own_signal_handlers):
    actuator, registry = SigtermDuringFirstAction(), CollectorRegistry()
    code, elector = gputide_run(monkeypatch, api, clock, actuator, ACTIONS, registry)

    assert code == 0   # returns: without the signal the loop would run for ever
    assert actuator.calls == [ACTIONS[0]]
    assert registry.get_sample_value("gputide_actions_rejected_total", {"reason": "shutting_down"}) == 2
    spec = kube.get("leases", "gputide-controller", "gputide")["spec"]
    assert spec["holderIdentity"] == "" and not elector.is_leader
    assert a_standby_takes_over_at_once(api, clock), "no lease to wait out"
    assert elector.renew() is False, "the stopped replica's renewer does not take the Lease back"


def test_run_once_with_leader_elect_releases_the_lease_at_exit(kube: FakeKube, api, clock, monkeypatch):
    """`gputide run --once --leader-elect` (a CronJob, a manual cycle) holds the Lease for its one cycle only: at
    exit the holder is cleared, so the controller's replicas (or the next --once run) need not wait it out."""
    actuator = SigtermDuringFirstAction()
    actuator.calls.append(None)   # past its first call: it applies without raising a signal
    code, _ = gputide_run(monkeypatch, api, clock, actuator, ACTIONS[:1], CollectorRegistry(), "--once")

    assert code == 0
    assert actuator.calls == [None, ACTIONS[0]], "it acted as the leader"
    assert kube.get("leases", "gputide-controller", "gputide")["spec"]["holderIdentity"] == ""
    assert a_standby_takes_over_at_once(api, clock), "no lease to wait out"


def test_run_once_sigterm_mid_action_finishes_it_skips_the_rest_and_releases_the_lease(kube: FakeKube, api, clock,
                                                                                     monkeypatch, own_signal_handlers):
    """`--once` as the loop: SIGTERM while the first of three actions is in flight lets it finish and starts no
    other. Its handler (ccbb6d6c, for the Lease wait) set an Event the cycle never read: all three were applied, and a
    long cycle ran on until the kubelet's SIGKILL, mid-action with the Lease held (review r3)."""
    actuator, registry = SigtermDuringFirstAction(), CollectorRegistry()
    code, elector = gputide_run(monkeypatch, api, clock, actuator, ACTIONS, registry, "--once")

    assert code == 0
    assert actuator.calls == [ACTIONS[0]]
    assert registry.get_sample_value("gputide_actions_rejected_total", {"reason": "shutting_down"}) == 2
    assert kube.get("leases", "gputide-controller", "gputide")["spec"]["holderIdentity"] == ""
