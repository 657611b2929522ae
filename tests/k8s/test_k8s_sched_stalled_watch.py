"""A binding the bound-pod cache has not shown is dropped after `assume_s` only once that cache's watch has caught up
since the binding (`ListWatch.past`: a stream begun after it was ended by the server), not merely while it counts no
failure. A watch stalled without an error (a half-open connection: nothing arrives, and no failure is counted
until its read timeout, `watch_s` + 30 s) counted as healthy before, the binding was dropped after 30 s though the
cache had never shown it, and the next pod was bound onto the same GPUs (audit a1: test_probe_stall.py). An event
is no proof either: one written before the binding may arrive after it, and the stream stall next. Against the fake
API server."""

from __future__ import annotations

import threading

from fakeapi import FakeKube, node, pod
from kubernetes import client as k8s
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.k8s_watch import ListWatch

BOUND_WATCH = r"/pods\?(?=.*watch=true)(?=.*spec\.nodeName%21%3D)"   # the bound pods' watch, not their list


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def pods_watch(api, watch_s: float) -> ListWatch:
    core = k8s.CoreV1Api(api)
    return ListWatch("pods", lambda **kw: core.list_pod_for_all_namespaces(_preload_content=False, **kw).json(),
                     core.list_pod_for_all_namespaces, lambda obj: obj["metadata"]["name"], watch_s=watch_s).start()


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


def test_a_binding_the_cache_cannot_show_is_dropped_once_the_watch_has_caught_up(kube: FakeKube, api,
                                                                               clock) -> None:
    """Bound, then deleted before a pass saw it in the cache: it frees its node once a stream begun after the
    binding has ended (its GPUs would otherwise look taken for good)."""
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0).start()
    try:
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])
        assert sched.schedule_once() == {"default/big": "a"}
        kube.delete("pods", "big", "default")
        clock.advance(31)
        eventually(lambda: sched.nodes_view()[0]["gpus_free"] == 8)
        assert sched._assumed == {}
    finally:
        sched.close()


def test_only_a_stream_begun_after_the_mark_and_ended_by_the_server_is_past_it(kube: FakeKube, api) -> None:
    slow, quick = pods_watch(api, 60.0), pods_watch(api, 1.0)
    try:
        eventually(lambda: slow.streams and quick.streams)
        marks = slow.mark(), quick.mark()
        kube.add(pod("p", gpus=1))   # written after the marks: both caches show it, as an event
        eventually(lambda: "default/p" in slow.snapshot()[1] and "default/p" in quick.snapshot()[1])
        assert not slow.past(marks[0])   # an event is no proof: its stream may stall next
        eventually(lambda: quick.past(marks[1]))   # the stream open at the mark ended, and the next one
        assert quick.streams > marks[1] + 1 and quick.failures == 0
        quick.stop()
        stopped = quick.mark()
        assert not quick.past(stopped)
    finally:
        slow.stop()
        quick.stop()


def test_a_view_drops_a_binding_only_by_what_the_watch_had_caught_up_before_its_cache_was_pinned(
        kube: FakeKube, api, clock) -> None:
    """The view pins the bound-pod cache, then decides which bindings it drops. Between the two the watch may apply
    the binding's event and a stream end: caught up now, though the pinned cache does not show the binding, which
    was dropped, its GPUs free in the view (audit a4: 9 GPUs bound on an 8-GPU node)."""
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0).start()
    release = threading.Event()
    try:
        bound_while_stalled(kube, sched, release)
        watch, mark = sched.watches["bound pods"], sched._assumed["default/big"][2]
        clock.advance(31)
        cached = sched._cached

        def pinned(name: str):   # the cache as the view pins it, then the watch catches up at once
            items = cached(name)
            if name == "bound pods" and not release.is_set():
                release.set()
                eventually(lambda: watch.past(mark))
            return items

        sched._cached = pinned
        view = sched.nodes_view()
        assert release.is_set() and "default/big" not in sched._pass_bound
        assert view[0]["gpus_free"] == 0   # big is assumed still: the pinned cache does not show it
        assert sched.nodes_view()[0]["gpus_free"] == 0 and sched._assumed == {}   # the next view's cache shows it
    finally:
        release.set()
        sched.close()
