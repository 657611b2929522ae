"""A binding made while the bound-pod watch has not synced yet (its first list keeps failing) is not dropped by time:
the watch may then sync from a list served from the API server's watch cache (`resourceVersion=0`, which may lag)
that lacks it. Before, past `assume_s` it was dropped with no read (audit a2: test_a2_unsynced.py), its GPUs looked
free once the watch synced, and the next pass bound another pod onto them. Now it is kept and read back by GET past
`assume_s`, as with a synced watch: kept on its node, dropped (the pod offered again) when the pod is on no node.
Meanwhile the pass's own consistent list counts its room, once. Against the fake API server, with watches."""

from __future__ import annotations

from fakeapi import FakeKube, node
from kubernetes.client.exceptions import ApiException
from test_k8s_sched_cut_watch import first, pending, unsure, waiting
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler

BIG_GET = r"/namespaces/default/pods/big$"


class Lagging:
    """The bound-pod watch's list: failing while `failing`, then served as a lagging watch cache, without `hidden`."""

    def __init__(self, real, hidden: str) -> None:
        self.real, self.hidden, self.failing = real, hidden, True

    def __call__(self, **kw):
        if self.failing:
            raise ApiException(status=500, reason="list too slow")
        out = self.real(**kw)
        out["items"] = [p for p in out["items"] if p["metadata"]["name"] != self.hidden]
        return out


def unsynced(kube: FakeKube, api, clock, gpus: int = 8, hidden: str = "big") -> tuple[SecondaryScheduler, Lagging]:
    """Node a with `gpus`; the scheduler watching, every cache synced but the bound pods' (its list failing)."""
    kube.add(node("a", gpus))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0, sleep=lambda s: None)
    watch = sched.watches["bound pods"]
    watch.list_call = listing = Lagging(watch.list_call, hidden)
    for w in sched.watches.values():
        w.backoff_s = 0.05
    sched.start()
    eventually(lambda: all(w.synced for k, w in sched.watches.items() if k != "bound pods") and watch.failures > 0)
    return sched, listing


def test_a_binding_made_before_the_watch_synced_is_read_back_not_dropped_by_time(kube: FakeKube, api, clock) -> None:
    sched, listing = unsynced(kube, api, clock)
    watch = sched.watches["bound pods"]
    try:
        waiting(kube, sched, ["big"], 8)
        assert sched.schedule_once() == {"default/big": "a"}
        clock.advance(sched.assume_s)
        assert pending(sched) == [] and not watch.synced
        listing.failing = False
        eventually(lambda: watch.synced)   # from a list that lacks big
        assert "default/big" not in watch.snapshot()[1]
        waiting(kube, sched, ["small"], 1)
        assert sched.schedule_once() == {"default/small": None}   # a's 8 GPUs are big's
        assert kube.get("pods", "small", "default")["spec"].get("nodeName") is None
        assert len(kube.calls("GET", BIG_GET)) == 1   # big read back once past assume_s: on a, kept
    finally:
        sched.close()


def test_a_kept_binding_counts_once_in_a_pass_that_lists_the_bound_pods_itself(kube: FakeKube, api, clock) -> None:
    sched, _ = unsynced(kube, api, clock)
    try:
        waiting(kube, sched, ["big"], 4)
        assert sched.schedule_once() == {"default/big": "a"}
        clock.advance(sched.assume_s)
        waiting(kube, sched, ["mid"], 4)   # big read back: on a, kept (not offered again)
        assert not sched.watches["bound pods"].synced and "default/big" in sched._assumed
        assert sched.schedule_once() == {"default/mid": "a"}   # big's 4 GPUs, listed, not counted again
    finally:
        sched.close()


def test_a_binding_that_failed_before_the_watch_synced_is_placed_again(kube: FakeKube, api, clock) -> None:
    sched, _ = unsynced(kube, api, clock)
    try:
        waiting(kube, sched, ["big"], 8)
        unsure(kube, sched, "big")   # assumed on a, though not bound
        assert pending(sched) == []
        clock.advance(sched.assume_s)
        assert pending(sched) == ["big"] and not sched.watches["bound pods"].synced   # read back: on no node
        assert sched.schedule_once() == {"default/big": "a"}
    finally:
        sched.close()
