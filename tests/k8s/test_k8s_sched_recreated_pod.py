"""A pod deleted and created again under the same name (a StatefulSet's replica, a Job pod of a fixed name) while its
predecessor's binding is assumed is placed at the next pass: the pending pod's uid is not the binding's, so the
binding is read back at once (a GET, not after `assume_s`), and dropped: another pod holds the name. Before, the new
pod counted as the one bound: left out of the pending pods (told nothing, placed nowhere) and its predecessor's room
held, for `assume_s` and a read back. Against the fake API server, with watches."""

from __future__ import annotations

from fakeapi import FakeKube, pod
from test_k8s_sched_cut_watch import POD_GET, pending, scheduler, unsure, waiting  # noqa: F401 - a fixture
from test_k8s_watch import eventually


def test_a_pod_created_again_under_an_assumed_name_is_placed_at_once(
        kube: FakeKube, clock, scheduler) -> None:  # noqa: F811
    sched = scheduler()
    waiting(kube, sched, ["web-0"], 8)
    unsure(kube, sched, "web-0")   # assumed on a, though its binding failed
    old, reads = kube.get("pods", "web-0", "default")["metadata"]["uid"], len(kube.calls("GET", POD_GET))
    kube.delete("pods", "web-0", "default")
    kube.add(pod("web-0", gpus=8, scheduler="gputide", phase="Pending"))
    assert kube.get("pods", "web-0", "default")["metadata"]["uid"] != old
    eventually(lambda: pending(sched) == ["web-0"])   # no clock advanced: read back at once
    assert len(kube.calls("GET", POD_GET)) == reads + 1 and sched._assumed == {}
    assert sched.schedule_once() == {"default/web-0": "a"}   # its predecessor's room is free
    assert kube.get("pods", "web-0", "default")["spec"]["nodeName"] == "a"


def test_an_assumed_binding_is_not_read_back_early_for_its_own_pod(
        kube: FakeKube, clock, scheduler) -> None:  # noqa: F811
    """The pending pod of the binding's own uid (the pending watch behind the binding) is no reason to read it."""
    sched = scheduler()
    waiting(kube, sched, ["web-0"], 8)
    unsure(kube, sched, "web-0")
    reads = len(kube.calls("GET", POD_GET))
    for _ in range(3):
        assert pending(sched) == []
    assert len(kube.calls("GET", POD_GET)) == reads and list(sched._assumed) == ["default/web-0"]


def test_a_failed_read_for_a_pod_created_again_is_not_repeated_while_the_clock_stands(
        kube: FakeKube, clock, scheduler) -> None:  # noqa: F811
    """Read at once, once: for the new pod's uid, not while the binding's read time equals its own (a clock that has
    not moved since the binding, a read that failed in that instant). Before, the failed GET was sent every pass."""
    sched = scheduler()
    waiting(kube, sched, ["web-0"], 8)
    unsure(kube, sched, "web-0")
    kube.delete("pods", "web-0", "default")
    kube.add(pod("web-0", gpus=8, scheduler="gputide", phase="Pending"))
    eventually(lambda: "default/web-0" in {r["name"] for r in sched._items(
        "pending pods", "list pending pods", sched.api.core.list_pod_for_all_namespaces, lambda r: r)[0]
        if sched._another(r)})
    kube.inject("GET", POD_GET, 500, count=100)
    reads = len(kube.calls("GET", POD_GET))
    for _ in range(3):   # the clock never moves
        assert pending(sched) == []
    assert len(kube.calls("GET", POD_GET)) == reads + 1 and list(sched._assumed) == ["default/web-0"]
