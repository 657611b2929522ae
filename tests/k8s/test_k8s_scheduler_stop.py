"""SIGTERM stops `gputide schedule` within its grace period, the Lease released. The signal only set a flag checked
between passes, so a pass of many pods on a slow API server (reads up to 2 minutes, each pod's turn up to 1) ran
past the pod's 30 s grace period and was SIGKILLed with the Lease held: the standby waited out a whole lease
duration. Now a stop (`SecondaryScheduler.stop()`, what the signal does) is asked where the Lease is, before each
pod's turn and each binding: the binding in progress completes, nothing more is begun, the Lease is released."""

from __future__ import annotations

import signal

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler_lease import a_cluster, elector_on_test_clock, holder  # noqa: F401 - a fixture

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.app.scheduling import EnginePlacer
from balancer.cli import main
from balancer.cmd import schedule as schedule_cmd


def bound(kube: FakeKube) -> list[str]:
    return [r.path.split("/")[-2] for r in kube.calls("POST", r"/binding$")]


@pytest.mark.parametrize(("when", "want"), [
    (None, ["first", "second"]),
    (r"/binding$", ["first"]),
    (r"^/api/v1/pods\?", []),
], ids=["not stopped: it binds and preempts", "stopped during the first binding: that one completes, no other",
        "stopped while the pending pods are read: none is begun"])
def test_a_stop_ends_the_pass_before_its_next_pod_never_in_a_binding(kube: FakeKube, api, clock, when, want):
    a_cluster(kube)
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock)
    if when:
        kube.before(None, when, scheduler.stop)

    results = scheduler.schedule_once()

    assert bound(kube) == want
    assert kube.get("pods", "first", "ml")["spec"].get("nodeName") == ("h100-a" if want else None)
    assert bool(kube.calls("POST", r"/eviction$")) is (when is None)   # `big` preempts only in a whole pass
    assert results == {f"ml/{p}": "h100-a" for p in want} | ({"ml/big": None} if when is None else {})
    assert scheduler.stopping is (when is not None)


def test_a_stop_between_the_members_of_a_pod_group_begins_no_other_member(kube: FakeKube, api, clock):
    """A member's turn is a pod's: once stopped none more is begun (the group keeps the member bound, as when the
    Lease is lost or a binding fails; the next leader binds the rest)."""
    kube.add(node("n1", 8))
    for i in range(3):
        kube.add(pod(f"w{i}", "ml", gpus=1, scheduler="gputide", phase="Pending", labels={GROUP_LABEL: "job"}))
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock)
    kube.before("POST", r"/binding$", scheduler.stop)

    scheduler.schedule_once()

    assert len(bound(kube)) == 1
    assert len(kube.calls("POST", r"/events$")) == 1, "the bound member's Scheduled Event; no other member is told"


@pytest.mark.usefixtures("elector_on_test_clock")
def test_sigterm_mid_pass_binds_no_further_pod_and_releases_the_lease(kube, kubeconfig, monkeypatch):
    """The serving scheduler (watches, passes until a signal), SIGTERM arriving while its first binding is in
    flight: it exits 0 without binding `second` or preempting for `big`, and the Lease is free for the standby."""
    a_cluster(kube)
    handlers = {}
    monkeypatch.setattr(schedule_cmd.signal, "signal", lambda sig, handler: handlers.setdefault(sig, handler))
    kube.before("POST", r"/binding$", lambda: handlers[signal.SIGTERM](signal.SIGTERM, None))

    assert main(["schedule", "--kubeconfig", kubeconfig, "--policy", "bestfit", "--leader-elect",
                 "--lease-namespace", "gputide", "--metrics-port", "0", "--interval", "60s"]) == 0

    assert bound(kube) == ["first"] and not kube.calls("POST", r"/eviction$")
    assert holder(kube) == "", "released: the standby takes over at once, not a lease duration later"


def test_once_puts_the_callers_signal_handlers_back(kube, kubeconfig):
    """`gputide schedule --once` (a one-shot, or a caller's process) stops on SIGTERM too, then leaves the
    process's handlers as it found them."""
    a_cluster(kube)
    before = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    assert main(["schedule", "--once", "--kubeconfig", kubeconfig, "--policy", "bestfit"]) == 0
    assert bound(kube) == ["first", "second"]
    assert (signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)) == before
