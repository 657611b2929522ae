"""A binding the bound-pod cache does not show is not dropped because a watch stream begun after it ended cleanly: a
proxy, load balancer or API server may close a stream cleanly before it delivered the binding's event, and the cache
still does not show the pod bound. Before, such a stream counted as caught up (`ListWatch.past`): after `assume_s`
the binding was dropped, its GPUs looked free, and the next pass bound another pod onto them. Now a binding past
`assume_s` that the cache does not show is read back (a GET): kept while the pod is on its node. Against the fake
API server, with watches."""

from __future__ import annotations

import threading
import time

from fakeapi import FakeKube, pod
from test_k8s_sched_cut_watch import POD_GET, pending, scheduler, waiting  # noqa: F401 - a fixture
from test_k8s_watch import eventually

import balancer.actuate.k8s_watch as k8s_watch_module
from balancer.actuate.k8s_reads import BOUND

REAL_WATCH = k8s_watch_module.k8s_watch.Watch
CUTTING = threading.Event()   # set: each bound-pod stream is closed cleanly at once, before any event


class CleanCutWatch(REAL_WATCH):
    """While `CUTTING`, a bound-pod stream ends with no error and no event, as a proxy closes it cleanly."""

    def stream(self, func, *args, **kwargs):
        if CUTTING.is_set() and BOUND in (kwargs.get("field_selector") or ""):
            time.sleep(0.05)
            return
        yield from REAL_WATCH.stream(self, func, *args, **kwargs)


class CleanCutWatches:
    Watch = CleanCutWatch


def test_a_stream_closed_cleanly_before_the_bindings_event_does_not_drop_it(
        kube: FakeKube, clock, scheduler, monkeypatch) -> None:  # noqa: F811
    monkeypatch.setattr(k8s_watch_module, "k8s_watch", CleanCutWatches)
    sched = scheduler()
    watch = sched.watches["bound pods"]
    CUTTING.set()
    try:
        begun = watch.streams
        eventually(lambda: watch.streams > begun + 1)   # the stream open when the cuts began has ended
        waiting(kube, sched, ["big"], 8)
        assert sched.schedule_once() == {"default/big": "a"}
        after = watch.streams
        eventually(lambda: watch.streams > after + 1)   # streams begun after the binding, each ended cleanly
        assert watch.failures == 0 and "default/big" not in watch.snapshot()[1]
        clock.advance(sched.assume_s)
        kube.add(pod("small", gpus=1, scheduler="gputide", phase="Pending"))
        eventually(lambda: pending(sched) == ["small"])
        assert len(kube.calls("GET", POD_GET)) == 1   # big read back: on a, kept
        assert sched.schedule_once() == {"default/small": None}   # a's 8 GPUs are big's
        assert "Insufficient nvidia.com/gpu" in sched.reasons["default/small"]
        assert kube.get("pods", "small", "default")["spec"].get("nodeName") is None
    finally:
        CUTTING.clear()
    eventually(lambda: "default/big" in watch.snapshot()[1])   # the streams deliver again: the cache shows big
    assert sched.schedule_once() == {"default/small": None} and sched._assumed == {}
