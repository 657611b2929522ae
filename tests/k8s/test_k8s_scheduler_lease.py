"""The secondary scheduler never binds (nor preempts) without a valid Lease: the elector's renewer thread keeps the
Lease however long a pass runs, and the pass asks its check (no I/O) before each pod and each binding, as the
controller asks before each action. A replica whose renewals stop within a pass binds nothing more in it, and
`gputide schedule --once --leader-elect` does not act without the Lease, releasing it at exit."""

from __future__ import annotations

import functools

import pytest
from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.app.scheduling import EnginePlacer
from balancer.cli import main
from balancer.cmd import run as run_cmd
from balancer.cmd import schedule as schedule_cmd

H100 = "NVIDIA-H100-80GB-HBM3"


def pending(name: str, gpus: int, priority: int) -> dict:
    p = pod(name, "ml", gpus=gpus, scheduler="gputide", phase="Pending")
    p["spec"]["priority"] = priority
    return p


def a_cluster(kube: FakeKube) -> None:
    """One 8-GPU node, 6 GPUs held by a low-priority pod; pending by priority: `first` and `second` (1 GPU each),
    then `big` (4 GPUs: fits only if the low-priority pod is preempted)."""
    kube.add(node("h100-a", 8, model=H100))
    kube.add(pod("low", "ml", gpus=6, node_name="h100-a", phase="Running"))
    kube.add(pending("first", 1, 10))
    kube.add(pending("second", 1, 7))
    kube.add(pending("big", 4, 5))


@pytest.mark.parametrize("lost", [False, True], ids=["while it leads it binds and preempts",
                                                     "the Lease lost at its first binding: nothing more is done"])
def test_a_pass_asks_for_the_lease_before_each_pod_and_each_binding(kube: FakeKube, api, clock, lost) -> None:
    a_cluster(kube)
    lease = {"held": True}
    if lost:   # the renewer gives up while the first binding is in flight
        kube.before("POST", r"/binding$", lambda: lease.update(held=False))
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock, leading=lambda: lease["held"])

    results = scheduler.schedule_once()

    bound = [r.path.split("/")[-2] for r in kube.calls("POST", r"/binding$")]
    evicted = [r.path.split("/")[-2] for r in kube.calls("POST", r"/eviction$")]
    if lost:
        assert (bound, evicted, results) == (["first"], [], {"ml/first": "h100-a"})
    else:
        assert (bound, evicted) == (["first", "second"], ["low"])


@pytest.fixture
def elector_on_test_clock(monkeypatch, clock) -> list[LeaseLeaderElector]:
    """`gputide schedule`'s elector, identity replica-a, timed on the test's clock and renewed only when the test
    says (`start` runs no thread), so a pass can outlive its renew deadline without waiting on wall time."""
    made = []

    def make(api_client, name, namespace, interval):
        elector = run_cmd.lease_elector(api_client, name, namespace, interval)
        elector.identity, elector.clock = "replica-a", clock
        elector.start = functools.partial(LeaseLeaderElector.start, elector, thread=False)
        made.append(elector)
        return elector

    monkeypatch.setattr(schedule_cmd, "lease_elector", make)
    return made


def schedule_once(kubeconfig: str) -> int:
    return main(["schedule", "--kubeconfig", kubeconfig, "--once", "--policy", "bestfit", "--leader-elect",
                 "--lease-namespace", "gputide"])


def holder(kube: FakeKube) -> str:
    return kube.get("leases", "gputide-scheduler", "gputide")["spec"]["holderIdentity"]


def test_once_with_the_lease_free_binds_and_releases_it_at_exit(kube, kubeconfig, elector_on_test_clock, capsys):
    a_cluster(kube)
    assert schedule_once(kubeconfig) == 0
    assert "ml/first -> h100-a" in capsys.readouterr().out
    assert len(kube.calls("POST", r"/binding$")) == 2
    assert holder(kube) == "", "released: the scheduler's replicas take over at once"


def test_once_while_another_replica_holds_the_lease_binds_nothing(kube, api, clock, kubeconfig,
                                                                  elector_on_test_clock, capsys, monkeypatch):
    """The holder is alive: it renews while the --once pass watches its Lease (test_k8s_once_lease_expired.py)."""
    a_cluster(kube)
    other = LeaseLeaderElector(api, "gputide-scheduler", "gputide", "replica-b", clock=clock)
    assert other.try_acquire_or_renew() is True
    renewals = []

    def pause(_self, seconds: float) -> None:   # the --once wait between tries: the holder renews meanwhile
        clock.advance(seconds)
        renewals.append(other.try_acquire_or_renew())

    monkeypatch.setattr(SecondaryScheduler, "wait_for_work", pause)
    assert schedule_once(kubeconfig) == 0
    assert renewals == [True], "it watched the Lease until its holder renewed it"
    assert "not the leader" in capsys.readouterr().out
    assert not kube.calls("POST", r"/(binding|eviction)$") and holder(kube) == "replica-b"


def test_once_stops_binding_when_its_renewals_stop_within_the_pass(kube, clock, kubeconfig, elector_on_test_clock):
    """The first binding takes longer than the renew deadline and no renewal lands meanwhile: the Lease may be
    another replica's by now, so the rest of the pass is not bound (the old scheduler checked once per pass)."""
    a_cluster(kube)
    kube.before("POST", r"/binding$", lambda: clock.advance(elector_on_test_clock[0].renew_deadline_s + 1))
    assert schedule_once(kubeconfig) == 0
    assert [r.path.split("/")[-2] for r in kube.calls("POST", r"/binding$")] == ["first"]
    assert not kube.calls("POST", r"/eviction$")
