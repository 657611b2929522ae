"""`gputide schedule --once --leader-elect` and `gputide run --once --leader-elect` behind the Lease of a crashed
holder (audit of session 38): renewTime an hour old, no one renewing it. The elector does not trust the holder's
renewTime (another clock) and takes a Lease over only once it has seen it unchanged for a lease duration on its own
clock; a --once run made one try, found it held and exited a standby, exit 0, at every run of a CronJob until someone
deleted the Lease. It now watches the Lease for up to a lease duration (`LeaseLeaderElector.await_lease`, a try every
retry period) and takes it once unchanged so long; a Lease its holder renews meanwhile leaves it a standby, exit 0, at
that renewal; SIGTERM ends the wait at once. The elector here is the one the commands build, on the test's clock,
its pauses between tries advancing that clock (no real waiting), its renewer thread not started."""

from __future__ import annotations

import functools
import os
import signal
from datetime import UTC, datetime, timedelta

import pytest
from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.cli import main
from balancer.cmd import run as run_cmd
from balancer.cmd import schedule as schedule_cmd

ME = "replica-a"


def dead_holders_lease(name: str) -> dict:
    """A Lease its holder left when it crashed an hour ago: nobody renews it."""
    stamp = (datetime.now(UTC) - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "gputide"},
            "spec": {"holderIdentity": "crashed-replica", "leaseDurationSeconds": 15, "renewTime": stamp,
                     "acquireTime": stamp, "leaseTransitions": 2}}


class Waits:
    """The --once wait's pauses: each advances the test's clock by what it was asked, then runs `meanwhile` (what
    happens elsewhere during it: the holder renewing, a SIGTERM)."""

    def __init__(self, clock) -> None:
        self.clock, self.asked, self.meanwhile = clock, [], lambda: None

    def __call__(self, seconds: float) -> bool:
        self.asked.append(seconds)
        self.clock.advance(seconds)
        self.meanwhile()
        return False


@pytest.fixture
def waits(monkeypatch, clock) -> Waits:
    waits, build = Waits(clock), run_cmd.lease_elector

    def make(api_client, name, namespace, interval):
        elector = build(api_client, name, namespace, interval)
        elector.clock, elector.pause = clock, waits   # `clock` alone: wall and monotonic both
        elector.start = functools.partial(LeaseLeaderElector.start, elector, thread=False)
        return elector

    monkeypatch.setenv("POD_NAME", ME)
    monkeypatch.setattr(run_cmd, "lease_elector", make)
    monkeypatch.setattr(schedule_cmd, "lease_elector", make)
    monkeypatch.setattr(SecondaryScheduler, "wait_for_work", lambda self, seconds: waits(seconds))
    return waits


def run_once(kubeconfig: str) -> int:
    return main(["run", "--prometheus", "http://127.0.0.1:9", "--kubeconfig", kubeconfig, "--once", "--metrics-port",
                 "0", "--leader-elect", "--lease-namespace", "gputide", "--dry-run"])


def schedule_once(kubeconfig: str) -> int:
    return main(["schedule", "--kubeconfig", kubeconfig, "--once", "--metrics-port", "0", "--leader-elect",
                 "--lease-namespace", "gputide"])


def taken_by_me(kube: FakeKube, name: str) -> bool:
    """Whether this replica wrote the Lease as a new holder (a takeover: one more transition)."""
    writes = [r.body["spec"] for r in kube.calls("PUT", rf"/leases/{name}$")]
    return any(w["holderIdentity"] == ME and w["leaseTransitions"] == 3 for w in writes)


def a_pending_pod(kube: FakeKube) -> None:
    kube.add(node("n1", 8))
    kube.add(pod("p", "ml", gpus=1, scheduler="gputide", phase="Pending"))


def test_schedule_once_takes_a_dead_holders_lease_after_a_lease_duration(kube, kubeconfig, waits, capsys):
    a_pending_pod(kube)
    kube.add(dead_holders_lease("gputide-scheduler"))
    assert schedule_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert "not the leader" not in out and "ml/p -> n1" in out, out + err
    assert kube.calls("POST", r"/binding$")
    assert taken_by_me(kube, "gputide-scheduler")
    assert sum(waits.asked) >= 15, "not before a lease duration seen unchanged on its own clock"
    assert kube.get("leases", "gputide-scheduler", "gputide")["spec"]["holderIdentity"] == "", "released at exit"


def test_run_once_takes_a_dead_holders_lease_after_a_lease_duration(kube, kubeconfig, waits, capsys):
    kube.add(dead_holders_lease("gputide-controller"))
    assert run_once(kubeconfig) == 3   # the cycle, as leader, holds still: Prometheus is on a closed port
    out, err = capsys.readouterr()
    assert out.startswith("cycle: fail_static telemetry_unavailable"), out + err
    assert taken_by_me(kube, "gputide-controller")
    assert sum(waits.asked) >= 15, "not before a lease duration seen unchanged on its own clock"
    assert kube.get("leases", "gputide-controller", "gputide")["spec"]["holderIdentity"] == "", "released at exit"


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_a_lease_its_holder_renews_meanwhile_leaves_a_standby_exit_0_at_the_renewal(kube, api, kubeconfig, clock,
                                                                                     waits, capsys, command):
    name = "gputide-scheduler" if command == "schedule" else "gputide-controller"
    holder = LeaseLeaderElector(api, name, "gputide", "replica-b", clock=clock)
    assert holder.try_acquire_or_renew()
    waits.meanwhile = holder.try_acquire_or_renew   # the live holder renews during the first pause
    a_pending_pod(kube)
    code = schedule_once(kubeconfig) if command == "schedule" else run_once(kubeconfig)
    out, err = capsys.readouterr()
    assert code == 0, out + err
    assert ("not the leader: another replica holds the Lease" in out if command == "schedule"
            else out.strip() == "cycle: standby not the leader"), out + err
    assert len(waits.asked) == 1, "it watched the Lease, and left at the holder's renewal"
    assert not kube.calls("PUT", rf"/leases/{name}$") or all(
        r.body["spec"]["holderIdentity"] == "replica-b" for r in kube.calls("PUT", rf"/leases/{name}$"))
    assert not kube.calls("POST", r"/binding$")


def test_sigterm_ends_schedule_onces_wait_at_once(kube, kubeconfig, waits, capsys):
    a_pending_pod(kube)
    kube.add(dead_holders_lease("gputide-scheduler"))
    waits.meanwhile = lambda: os.kill(os.getpid(), signal.SIGTERM)   # the handler stops the scheduler
    assert schedule_once(kubeconfig) == 0
    assert len(waits.asked) == 1, "no try after SIGTERM, no further pause"
    assert not taken_by_me(kube, "gputide-scheduler") and not kube.calls("POST", r"/binding$")
    assert kube.get("leases", "gputide-scheduler", "gputide")["spec"]["holderIdentity"] == "crashed-replica"
    capsys.readouterr()


@pytest.mark.parametrize("command", ["schedule", "run"])
def test_the_api_failing_during_the_wait_is_said_so_exit_3(kube, kubeconfig, waits, capsys, command):
    """The Lease read as a crashed holder's, then the API server fails it: not a standby, as a first try that could
    not read the Lease (test_k8s_run_lease_unreachable.py, test_k8s_schedule_lease_unreachable.py)."""
    name = "gputide-scheduler" if command == "schedule" else "gputide-controller"
    a_pending_pod(kube)
    kube.add(dead_holders_lease(name))
    waits.meanwhile = lambda: kube.inject("GET", rf"/leases/{name}$", 503, count=100)
    code = schedule_once(kubeconfig) if command == "schedule" else run_once(kubeconfig)
    out, err = capsys.readouterr()
    assert code == 3, out + err
    line = err.strip().splitlines()[-1]
    assert line.startswith(f"gputide {command} --once: the Kubernetes API could not be reached for the Lease: "
                           f"lease gputide/{name}: ") and "503" in line, line
    assert len(waits.asked) == 1, "no try after the one that failed"
    assert not taken_by_me(kube, name) and not kube.calls("POST", r"/binding$")
