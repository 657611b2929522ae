"""A binding made while the bound-pod watch has not synced yet (its first list keeps failing) is not dropped by time:
the watch may then sync from a list served from the API server's watch cache (`resourceVersion=0`, which may lag)
that lacks it. Before, past `assume_s` it was dropped with no read (audit a2: test_a2_unsynced.py), its GPUs looked
free once the watch synced, and the next pass bound another pod onto them. Now it is kept and read back by GET past
`assume_s`, as with a synced watch: kept on its node, dropped (the pod offered again) when the pod is on no node.
Meanwhile the pass's own consistent list counts its room, once, and counts as its read: no GET is spent on a binding
it shows, so a failed one's read no longer waits behind theirs (audit a3), nor does a pod created again under a
binding's name. Against the fake API server, with watches."""

from __future__ import annotations

from fakeapi import FakeKube, node, pod
from kubernetes.client.exceptions import ApiException
from test_k8s_sched_cut_watch import POD_GET, first, pending, unsure, waiting
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


def bound_then_unsure(kube: FakeKube, sched, clock) -> list[str]:
    """25 one-GPU pods bound on a (assumed: the bound-pod watch has not synced), then "zz" assumed on a though its
    binding failed (`unsure`); the 25 names."""
    names = [f"p{i:02d}" for i in range(25)]
    waiting(kube, sched, names, 1)
    assert sched.schedule_once() == {f"default/{n}": "a" for n in names}
    clock.advance(1)
    waiting(kube, sched, ["zz"], 8)
    unsure(kube, sched, "zz")   # assumed on a, though not bound
    return names


def test_bindings_the_pass_lists_are_not_read_back_so_a_failed_one_is_placed_again_at_once(
        kube: FakeKube, api, clock) -> None:
    """25 bindings kept, unsynced: the passes' own lists show them, so past `assume_s` only the failed one is read.
    Before, all 26 were due, 10 a pass, the failed one (made last) behind the others: placed passes later."""
    sched, _ = unsynced(kube, api, clock, gpus=64, hidden="nothing")
    try:
        names = bound_then_unsure(kube, sched, clock)
        waiting(kube, sched, ["huge"], 100)   # fits nowhere: every pass lists the nodes and bound pods
        clock.advance(sched.assume_s / 2)
        assert sched.schedule_once() == {"default/huge": None}   # lists the 25 bound: read now
        clock.advance(sched.assume_s / 2)
        gets = len(kube.calls("GET", POD_GET))
        assert sched.schedule_once() == {"default/huge": None, "default/zz": "a"}
        assert len(kube.calls("GET", POD_GET)) == gets + 1 and not sched.watches["bound pods"].synced
        assert set(sched._assumed) == {f"default/{n}" for n in [*names, "zz"]}   # kept: the cache may lag
    finally:
        sched.close()


def test_a_binding_whose_pod_still_waits_is_read_back_before_the_other_due_ones(kube: FakeKube, api, clock) -> None:
    """As above without a pod that fits nowhere: no pass lists the bound pods (the failed binding's own pod is hidden
    while assumed), so all 26 fall due together. The one whose pod the pending list still shows is read first: it
    was read last of them (made last), zz placed passes later (audit a5)."""
    sched, _ = unsynced(kube, api, clock, gpus=64, hidden="nothing")
    try:
        bound_then_unsure(kube, sched, clock)
        clock.advance(sched.assume_s)
        assert sched.schedule_once() == {"default/zz": "a"}   # read first, found unbound, placed in this pass
    finally:
        sched.close()


def created_again(kube: FakeKube, sched, name: str) -> None:
    """Pod `name` deleted and created again, pending, once the pending cache shows the new one."""
    kube.delete("pods", name, "default")
    kube.add(pod(name, gpus=8, scheduler="gputide", phase="Pending"))
    eventually(lambda: any(r["name"] == f"default/{name}" and sched._another(r) for r in sched._items(
        "pending pods", "list pending pods", sched.api.core.list_pod_for_all_namespaces, lambda r: r)[0]))


def test_a_pod_created_again_is_read_back_before_the_due_bindings(kube: FakeKube, api, clock) -> None:
    """25 bindings due (no pass listed them), a pod created again under another's name: its read goes first.
    Before, it sorted behind them (read longest ago first) and waited 3 passes."""
    sched, _ = unsynced(kube, api, clock, gpus=64, hidden="nothing")
    try:
        waiting(kube, sched, [f"p{i:02d}" for i in range(25)], 1)
        sched.schedule_once()
        clock.advance(1)
        waiting(kube, sched, ["web-0"], 8)
        unsure(kube, sched, "web-0")
        clock.advance(sched.assume_s)
        created_again(kube, sched, "web-0")
        assert pending(sched) == ["web-0"]
    finally:
        sched.close()


def test_a_pod_created_again_after_its_binding_was_read_back_is_read_at_once(kube: FakeKube, api, clock) -> None:
    """Read back past `assume_s` (kept: on its node, unsynced), then deleted and created again: read at once for the
    new pod. Before, only a binding never read was read at once: the new pod waited another `assume_s`."""
    sched, _ = unsynced(kube, api, clock)
    try:
        waiting(kube, sched, ["big"], 8)
        assert sched.schedule_once() == {"default/big": "a"}
        clock.advance(sched.assume_s)
        assert pending(sched) == [] and len(kube.calls("GET", BIG_GET)) == 1   # on a: kept
        clock.advance(1)
        created_again(kube, sched, "big")
        assert pending(sched) == ["big"] and len(kube.calls("GET", BIG_GET)) == 2
        assert sched.schedule_once() == {"default/big": "a"}   # its predecessor's room is free
    finally:
        sched.close()
