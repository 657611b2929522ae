"""SIGTERM stops `gputide schedule` within its grace period, the Lease released. The signal only set a flag checked
between passes, so a pass of many pods on a slow API server (reads up to 2 minutes, each pod's turn up to 1) ran
past the pod's 30 s grace period and was SIGKILLed with the Lease held: the standby waited out a whole lease
duration. Now a stop (`SecondaryScheduler.stop()`, what the signal does) is asked where the Lease is, before each
read, each pod's turn, each claim's node and each binding: the binding in progress completes, nothing more is
begun, the pods the stop left unbound in the turn it cut are told so, the Lease is released."""

from __future__ import annotations

import re
import signal

import pytest
from fakeapi import FakeKube, claim, node, pod, storage_class
from test_k8s_scheduler_lease import a_cluster, elector_on_test_clock, holder  # noqa: F401 - a fixture

from balancer.actuate.k8s_gang import GROUP_LABEL
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.app.scheduling import EnginePlacer
from balancer.cli import main


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


def events(kube: FakeKube) -> dict[str, tuple[str, str, str]]:
    """Each pod's Event (type, reason, message); one per pod at most."""
    out = {}
    for r in kube.calls("POST", r"/events$"):
        name = r.body["involvedObject"]["name"]
        assert name not in out, f"{name} told twice"
        out[name] = (r.body["type"], r.body["reason"], r.body["message"])
    return out


def deferred(why: str, group: str = "") -> tuple[str, str, str]:
    return ("Normal", "SchedulingDeferred", f"Not bound: scheduler gputide stopped its pass ({why}){group}; this pod "
            "stays pending for the scheduler's next pass (by the replica holding the Lease).")


@pytest.mark.parametrize(("how", "why"), [("stop", "shutting down"), ("lease", "this replica lost the Lease")],
                         ids=["stopped", "the Lease lost"])
def test_a_stop_between_the_members_of_a_pod_group_begins_no_other_member_and_tells_them(kube: FakeKube, api,
                                                                                          clock, how, why):
    """A member's turn is a pod's: once stopped (or the Lease lost) none more is begun (the group keeps the member
    bound, as when a binding fails; the next leader binds the rest). The members left unbound are told so: nothing
    said why they still waited (`kubectl describe pod` showed no Event). After a Lease loss the Events are the only
    writes: they decide nothing, where a binding or a claim's node would."""
    kube.add(node("n1", 8))
    for i in range(3):
        kube.add(pod(f"w{i}", "ml", gpus=1, scheduler="gputide", phase="Pending", labels={GROUP_LABEL: "job"}))
    lease = {"held": True}
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock, leading=lambda: lease["held"])
    kube.before("POST", r"/binding$", scheduler.stop if how == "stop" else lambda: lease.update(held=False))

    results = scheduler.schedule_once()

    (first,) = bound(kube)
    unbound = sorted({"w0", "w1", "w2"} - {first})
    group = " while binding pod group ml/job (1 of its 3 pending members bound)"
    assert events(kube) == {first: ("Normal", "Scheduled", f"Successfully assigned ml/{first} to n1"),
                            **{m: deferred(why, group) for m in unbound}}
    assert results == {f"ml/{first}": "n1"}, "the unbound members are not reported as fitting nowhere"
    writes = [r for r in kube.requests if r.method != "GET"]
    assert [r.path.rsplit("/", 1)[-1] for r in writes] == ["binding", "events", "events", "events"]


def a_pod_with_claims(kube: FakeKube, *claims: str) -> None:
    """Node n1 and pod `train` (1 GPU) mounting WaitForFirstConsumer `claims`, unbound and given no node yet."""
    kube.add(node("n1", 8))
    kube.add(storage_class("wffc"))
    for c in claims:
        kube.add(claim(c, "ml", storage_class="wffc"))
    p = pod("train", "ml", gpus=1, scheduler="gputide", phase="Pending")
    p["spec"]["volumes"] = [{"name": c, "persistentVolumeClaim": {"claimName": c}} for c in claims]
    kube.add(p)


def reads(kube: FakeKube) -> list[str]:
    return [r.path for r in kube.requests if r.method == "GET"]


PASS_READS = ["/api/v1/pods", "/api/v1/persistentvolumeclaims", "/api/v1/persistentvolumes",
              "/apis/storage.k8s.io/v1/storageclasses", "/api/v1/nodes", "/api/v1/pods"]


@pytest.mark.parametrize("how", ["stop", "lease"], ids=["stopped", "the Lease lost"])
@pytest.mark.parametrize("during", range(1, 5), ids=["claims", "volumes", "classes", "nodes"])
def test_a_stop_during_the_volume_reads_begins_no_other_read(kube: FakeKube, api, clock, during, how):
    """The claims, volumes and classes a pass lists when no watch has synced, then the nodes and bound pods: each
    was read whatever happened meanwhile, up to the reads' 2-minute deadline, so the grace period had to cover it.
    Now the read in flight at the stop (or the Lease loss) is the last: the pass returns, binding nothing."""
    a_pod_with_claims(kube, "ckpt")
    lease = {"held": True}
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock, leading=lambda: lease["held"])
    kube.before("GET", "^" + re.escape(PASS_READS[during]) + r"(\?|$)",
                scheduler.stop if how == "stop" else lambda: lease.update(held=False))

    assert scheduler.schedule_once() == {}

    assert reads(kube) == PASS_READS[:during + 1]
    assert not [r for r in kube.requests if r.method != "GET"], "no claim written, no pod bound or told"


def test_a_pass_not_stopped_reads_them_all_and_binds(kube: FakeKube, api, clock):
    """The case above without a stop: the same reads, then the claim's node and the binding."""
    a_pod_with_claims(kube, "ckpt")
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock)
    assert scheduler.schedule_once() == {"ml/train": "n1"}
    assert reads(kube)[:len(PASS_READS)] == PASS_READS


@pytest.mark.parametrize(("how", "why"), [("stop", "shutting down"), ("lease", "this replica lost the Lease")],
                         ids=["stopped", "the Lease lost"])
def test_a_stop_between_a_pods_claims_names_no_other_claim_and_binds_nothing(kube: FakeKube, api, clock, how, why):
    """A pod's claims are given its node one by one before its binding: once stopped, no other claim is read or
    written (a replica that lost the Lease must not choose nodes) and the pod is not bound; it is told why. The
    claim already written keeps the pod to that node for the next leader, as any `selected-node` does."""
    a_pod_with_claims(kube, "c1", "c2")
    lease = {"held": True}
    scheduler = SecondaryScheduler(api, place=EnginePlacer("bestfit"), clock=clock, leading=lambda: lease["held"])
    kube.before("PATCH", r"/persistentvolumeclaims/c1$",
                scheduler.stop if how == "stop" else lambda: lease.update(held=False))

    assert scheduler.schedule_once() == {}

    assert [r.path.rsplit("/", 1)[-1] for r in kube.requests if "/persistentvolumeclaims/" in r.path] == ["c1", "c1"]
    assert not bound(kube)
    assert events(kube) == {"train": deferred(why)}


@pytest.mark.usefixtures("elector_on_test_clock")
def test_sigterm_mid_pass_binds_no_further_pod_and_releases_the_lease(kube, kubeconfig, monkeypatch):
    """The serving scheduler (watches, passes until a signal), SIGTERM arriving while its first binding is in
    flight: it exits 0 without binding `second` or preempting for `big`, and the Lease is free for the standby."""
    a_cluster(kube)
    handlers = {}
    monkeypatch.setattr(signal, "signal", lambda sig, handler: handlers.setdefault(sig, handler))
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
