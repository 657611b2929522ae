"""A binding the bound-pod cache has not shown is not dropped after `assume_s` merely while that cache's watch counts
no failure: it is read back, and kept while the pod is on its node. A watch stalled without an error (a half-open
connection: nothing arrives, and no failure is counted until its read timeout, `watch_s` + 30 s) counted as healthy
before, the binding was dropped after 30 s though the cache had never shown it, and the next pod was bound onto the
same GPUs (audit a1: test_probe_stall.py). An event is no proof either: one written before the binding may arrive
after it, and the stream stall next; nor is a stream's end (test_k8s_sched_clean_cut_watch.py). Against the fake
API server."""

from __future__ import annotations

import threading

from fakeapi import FakeKube, node, pod
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler

BOUND_WATCH = r"/pods\?(?=.*watch=true)(?=.*spec\.nodeName%21%3D)"   # the bound pods' watch, not their list


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def bound_while_stalled(kube: FakeKube, sched: SecondaryScheduler, release: threading.Event) -> None:
    """`big` (8 GPUs) bound on a while the bound-pod watch hangs before its first byte (a half-open stream) until
    `release`: the cache cannot show the binding."""
    stalled = threading.Event()
    eventually(lambda: all(w.synced for w in sched.watches.values()))
    kube.before("GET", BOUND_WATCH, lambda: (stalled.set(), release.wait(20)), count=1)
    eventually(stalled.is_set)
    kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
    eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])
    assert sched.schedule_once() == {"default/big": "a"}


def test_a_binding_stays_assumed_while_the_bound_pod_watch_stalls_without_an_error(kube: FakeKube, api,
                                                                                 clock) -> None:
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0).start()
    release = threading.Event()
    try:
        bound_while_stalled(kube, sched, release)
        clock.advance(31)   # past the 30 s a binding is assumed by default
        kube.add(pod("small", gpus=1, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["small"])
        assert sched.watches["bound pods"].failures == 0   # healthy, as far as failures tell
        assert sched.schedule_once() == {"default/small": None}   # a's 8 GPUs are big's
        assert "Insufficient nvidia.com/gpu" in sched.reasons["default/small"]
        release.set()   # the stream answers again: the cache shows big, and the assumption ends
        eventually(lambda: "default/big" in sched.watches["bound pods"].snapshot()[1])
        assert sched.schedule_once() == {"default/small": None} and list(sched._assumed) == []
    finally:
        release.set()
        sched.close()


def test_a_binding_the_cache_cannot_show_is_dropped_once_read_back_gone(kube: FakeKube, api, clock) -> None:
    """Bound, then deleted before a pass saw it in the cache: it frees its node once read back after `assume_s`
    (its GPUs would otherwise look taken for good)."""
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0).start()
    try:
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])
        assert sched.schedule_once() == {"default/big": "a"}
        kube.delete("pods", "big", "default")
        clock.advance(31)
        eventually(lambda: sched.pending() == [] and sched.nodes_view()[0]["gpus_free"] == 8)
        assert sched._assumed == {}
    finally:
        sched.close()


def test_a_view_drops_a_binding_only_by_the_cache_it_pinned(kube: FakeKube, api, clock) -> None:
    """The view pins the bound-pod cache, then decides which bindings it drops. Between the two the watch may apply
    the binding's event: the cache shows it now, the pinned one does not, and a binding dropped by the cache as it is
    now would leave its GPUs free in the view (audit a4: 9 GPUs bound on an 8-GPU node)."""
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0).start()
    release = threading.Event()
    try:
        bound_while_stalled(kube, sched, release)
        watch = sched.watches["bound pods"]
        clock.advance(31)
        cached = sched._cached

        def pinned(name: str):   # the cache as the view pins it, then the watch shows the binding at once
            items = cached(name)
            if name == "bound pods" and not release.is_set():
                release.set()
                eventually(lambda: "default/big" in watch.snapshot()[1])
            return items

        sched._cached = pinned
        view = sched.nodes_view()
        assert release.is_set() and "default/big" not in sched._pass_bound
        assert view[0]["gpus_free"] == 0   # big is assumed still: the pinned cache does not show it
        assert sched.nodes_view()[0]["gpus_free"] == 0 and sched._assumed == {}   # the next view's cache shows it
    finally:
        release.set()
        sched.close()
