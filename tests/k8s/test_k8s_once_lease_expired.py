"""`gputide schedule --once --leader-elect` and `gputide run --once --leader-elect` behind the Lease of a crashed
holder (audit of session 38): renewTime an hour old, no one renewing it. The elector does not trust the holder's
renewTime (another clock) and takes a Lease over only once it has seen it unchanged for a lease duration on its own
clock; a --once run made one try, found it held and exited a standby, exit 0, at every run of a CronJob until someone
deleted the Lease. It now watches the Lease for up to a lease duration (`LeaseLeaderElector.await_lease`, a try every
retry period) and takes it once unchanged so long; a Lease its holder renews meanwhile leaves it a standby, exit 0, at
that renewal; SIGTERM ends the wait at once. The pause between tries is a sixth of the Lease watched (at most the
run's retry period, which follows its --interval: a 1 h interval paused 30 min), and the wait's end is judged by when a
try began (audit a14). The elector here is the one the commands build, on the test's clock, its pauses between tries
advancing that clock (no real waiting: `elector.pause` wins over the command's), its renewer thread not started."""

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


def run_once(kubeconfig: str, *flags: str) -> int:
    return main(["run", "--prometheus", "http://127.0.0.1:9", "--kubeconfig", kubeconfig, "--once", "--metrics-port",
                 "0", "--leader-elect", "--lease-namespace", "gputide", "--dry-run", *flags])


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


@pytest.fixture
def signals_kept():
    """A SIGTERM the command does not handle is recorded, not the end of the test process; the test's handlers are
    put back afterwards."""
    got, saved = [], {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    signal.signal(signal.SIGTERM, lambda signum, _frame: got.append(signum))
    yield got
    for s, handler in saved.items():
        signal.signal(s, handler)


def test_run_onces_pause_is_the_leases_not_its_own_long_interval(kube, api, kubeconfig, clock, waits, capsys):
    """`--interval 1h` makes this run's own Lease 3 h, its retry period 30 min: behind a live holder's 15 s Lease it
    waited 30 min (one pause) to leave a standby. It pauses a sixth of the Lease it watches: 2.5 s."""
    holder = LeaseLeaderElector(api, "gputide-controller", "gputide", "replica-b", clock=clock)
    assert holder.try_acquire_or_renew()
    waits.meanwhile = holder.try_acquire_or_renew
    assert run_once(kubeconfig, "--interval", "1h") == 0
    out, err = capsys.readouterr()
    assert out.strip() == "cycle: standby not the leader", out + err
    assert waits.asked == [2.5]


def test_run_once_with_a_24h_interval_takes_a_dead_holders_15s_lease_in_15s(kube, kubeconfig, waits, capsys):
    """Its own retry period would be 12 h (a 72 h Lease): the dead holder's 15 s Lease was taken after 12 h."""
    kube.add(dead_holders_lease("gputide-controller"))
    assert run_once(kubeconfig, "--interval", "24h") == 3   # the cycle, as leader, holds still (no Prometheus)
    out, err = capsys.readouterr()
    assert out.startswith("cycle: fail_static telemetry_unavailable"), out + err
    assert taken_by_me(kube, "gputide-controller")
    assert set(waits.asked) == {2.5} and 15 <= sum(waits.asked) <= 17.5, waits.asked


def test_a_slow_read_just_before_the_lease_duration_does_not_end_the_wait(kube, api, clock):
    """The try that began at 12.5 s (the Lease not yet to take) waits 5 s for its read (a call's limit): the wait's
    end (a lease duration and a pause: 17.5 s) is past when it returns. Judged by when the try began, as the takeover
    rule judges it, the next try is made, at 20 s, and takes the Lease; it gave up, a standby behind a dead holder."""
    kube.add(dead_holders_lease("gputide-controller"))
    elector = LeaseLeaderElector(api, "gputide-controller", "gputide", ME, clock=clock)   # 15 s: tries every 2.5 s
    assert not elector.try_acquire_or_renew()
    began, read = [], elector.api.coordination.read_namespaced_lease

    def slow_fifth(*args, **kwargs):
        began.append(clock.now)
        answer = read(*args, **kwargs)
        if len(began) == 5:
            clock.advance(5.0)
        return answer

    elector.api.coordination.read_namespaced_lease = slow_fifth
    start = clock.now
    assert elector.await_lease(pause=clock.advance) is True
    assert [t - start for t in began] == [2.5, 5.0, 7.5, 10.0, 12.5, 20.0]
    assert taken_by_me(kube, "gputide-controller")


def test_sigterm_ends_run_onces_wait_at_once(kube, kubeconfig, waits, signals_kept, capsys):
    """`run --once` had no SIGTERM handler: as a container's PID 1 (the signal ignored) it kept waiting, took the
    Lease and was killed in the middle of its cycle holding it. Its handler ends the wait: a standby, exit 0."""
    kube.add(dead_holders_lease("gputide-controller"))
    waits.meanwhile = lambda: os.kill(os.getpid(), signal.SIGTERM)
    assert run_once(kubeconfig) == 0
    out, err = capsys.readouterr()
    assert out.strip() == "cycle: standby not the leader", out + err
    assert len(waits.asked) == 1, "no try after SIGTERM, no further pause"
    assert not taken_by_me(kube, "gputide-controller") and not signals_kept, "run's handler got it"
    assert kube.get("leases", "gputide-controller", "gputide")["spec"]["holderIdentity"] == "crashed-replica"
    os.kill(os.getpid(), signal.SIGTERM)
    assert signals_kept == [signal.SIGTERM], "the handler found is put back at exit"


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
