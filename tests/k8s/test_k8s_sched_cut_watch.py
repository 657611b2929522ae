"""A binding past `assume_s` that the bound-pod cache has not shown is read back with a GET
(`k8s_sched_reads.read_back`): dropped when the pod is gone, on no node, or another pod of its name, kept when on
its node. Before, only a bound-pod stream the server ended cleanly after the binding could drop it (no longer:
test_k8s_sched_clean_cut_watch.py), and a watch whose every stream is cut by an error (a proxy whose longest stream
is shorter than `watch_s`) never has one: a pod deleted before a pass saw it bound held its node's room for ever,
and a binding of unknown outcome that failed after all was never placed again (audit a4: test_a4_cut.py). Each
binding is read at most once per `assume_s`, at most `READ_BACKS` a pass. Against the fake API server, with
watches."""

from __future__ import annotations

import pytest
import urllib3
from fakeapi import FakeKube, node, pod
from test_k8s_sched_unsure_assumed import BOUND_LIST, unanswered
from test_k8s_watch import eventually

import balancer.actuate.k8s_watch as k8s_watch_module
from balancer.actuate.k8s_reads import Usage
from balancer.actuate.k8s_sched_reads import READ_BACKS, Assumed, read_back
from balancer.actuate.k8s_scheduler import SecondaryScheduler

REAL_WATCH = k8s_watch_module.k8s_watch.Watch
POD_GET = r"/namespaces/default/pods/[^/]+$"


class CutWatch(REAL_WATCH):
    """Every stream ends in an error, never by the server: as a proxy cuts it short (urllib3's ProtocolError)."""

    def stream(self, func, *args, **kwargs):
        yield from REAL_WATCH.stream(self, func, *args, **kwargs)
        raise urllib3.exceptions.ProtocolError("Response ended prematurely")


class CutWatches:
    Watch = CutWatch


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


@pytest.fixture
def scheduler(kube: FakeKube, api, clock):
    """`scheduler(gpus=8, broken=False)`: node a with `gpus`, the scheduler watching (closed after the test); with
    `broken`, a bound-pod cache that cannot show a binding: its list and watch fail (nor is it past any mark)."""
    made: list[SecondaryScheduler] = []

    def make(gpus: int = 8, *, broken: bool = False) -> SecondaryScheduler:
        kube.add(node("a", gpus))
        sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0,
                                   sleep=lambda s: None).start()
        made.append(sched)
        for w in sched.watches.values():
            w.backoff_s = 0.05
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        if broken:
            kube.inject("GET", BOUND_LIST, 500, count=10_000)
            eventually(lambda: sched.watches["bound pods"].failures > 0)
        return sched

    yield make
    for sched in made:
        sched.close()


def pending(sched: SecondaryScheduler) -> list[str]:
    return [r["pod"] for r in sched.pending()]


def left_pending(sched: SecondaryScheduler) -> None:
    """Wait until the pending-pod cache shows no pod. `pending(sched) == []` is no such wait: it holds as soon as a
    pass binds (the binding assumed hides its pod) while that cache, lagging on a busy machine, may still show the pod;
    read back gone later, it is pending again (CI, 2d2ba49)."""
    eventually(lambda: not sched.watches["pending pods"].snapshot()[1])


def waiting(kube: FakeKube, sched: SecondaryScheduler, names: list[str], gpus: int) -> None:
    """Pods `names` pending, each for `gpus`, once the scheduler sees them."""
    for name in names:
        kube.add(pod(name, gpus=gpus, scheduler="gputide", phase="Pending"))
    eventually(lambda: pending(sched) == names)


def unsure(kube: FakeKube, sched: SecondaryScheduler, name: str) -> None:
    """A pass binds `name` without learning the outcome (`bind_unsure`): assumed on a, though not bound."""
    faults = unanswered(kube, name, made=False)
    assert sched.schedule_once() == {f"default/{name}": None} and sched.bind_unsure
    for fault in faults:
        fault.remaining = 0


def test_with_every_stream_cut_a_binding_that_failed_after_all_is_placed_again(kube: FakeKube, clock, scheduler,
                                                                                monkeypatch) -> None:
    monkeypatch.setattr(k8s_watch_module, "k8s_watch", CutWatches)
    sched = scheduler()
    waiting(kube, sched, ["big"], 8)
    unsure(kube, sched, "big")
    watch = sched.watches["bound pods"]
    eventually(lambda: watch.lists >= 3)   # streams come and go, each cut: none ends cleanly
    assert pending(sched) == []
    clock.advance(sched.assume_s)
    assert pending(sched) == ["big"]   # read back: on no node
    assert sched.schedule_once() == {"default/big": "a"}


def test_a_pod_deleted_before_the_cache_showed_its_binding_frees_its_node(kube: FakeKube, clock, scheduler) -> None:
    sched = scheduler(broken=True)
    waiting(kube, sched, ["big"], 8)
    assert sched.schedule_once() == {"default/big": "a"}
    kube.delete("pods", "big", "default")
    left_pending(sched)
    assert sched.nodes_view()[0]["gpus_free"] == 0
    clock.advance(sched.assume_s)
    assert pending(sched) == [] and sched._assumed == {}   # read back: gone
    assert sched.nodes_view()[0]["gpus_free"] == 8


def test_a_pod_created_again_under_the_name_of_an_assumed_one_is_placed(kube: FakeKube, clock, scheduler) -> None:
    """A StatefulSet's replica deleted and created again while its predecessor's binding is assumed: another uid."""
    sched = scheduler(broken=True)
    waiting(kube, sched, ["web-0"], 8)
    unsure(kube, sched, "web-0")
    kube.delete("pods", "web-0", "default")
    uid = kube.add(pod("web-0", gpus=8, scheduler="gputide", phase="Pending"))["metadata"]["uid"]
    clock.advance(sched.assume_s)
    # the new uid, not just the name: a pending cache lagging behind the delete shows the old pod, which its
    # DELETED event then takes away before the ADDED of the new one (CI at c7a8c9a: the pass saw no pod)
    eventually(lambda: [(r["pod"], r["uid"]) for r in sched.pending()] == [("web-0", uid)])
    assert sched.schedule_once() == {"default/web-0": "a"}


def test_a_binding_on_its_node_is_kept_and_read_once_per_assume_s_at_most_read_backs_a_pass(
        kube: FakeKube, clock, scheduler) -> None:
    many = READ_BACKS + 2
    sched = scheduler(many, broken=True)
    waiting(kube, sched, [f"p{i:02d}" for i in range(many)], 1)
    assert all(sched.schedule_once().values())
    eventually(lambda: pending(sched) == [])
    assert kube.calls("GET", POD_GET) == []
    clock.advance(sched.assume_s)
    assert pending(sched) == [] and len(kube.calls("GET", POD_GET)) == READ_BACKS
    assert pending(sched) == [] and len(kube.calls("GET", POD_GET)) == many   # then those not read yet
    assert pending(sched) == [] and len(kube.calls("GET", POD_GET)) == many   # none again within assume_s
    assert sched.nodes_view()[0]["gpus_free"] == 0 and len(sched._assumed) == many   # each on a: kept
    clock.advance(sched.assume_s)
    assert pending(sched) == [] and len(kube.calls("GET", POD_GET)) == many + READ_BACKS


def test_a_pod_whose_read_back_keeps_failing_is_tried_once_per_assume_s_and_holds_back_no_other(
        kube: FakeKube, clock, scheduler) -> None:
    """A failed read counts as one (kept, not read again within `assume_s`) and is not retried: it used to end the
    reads of each pass before any other's, with the API wrapper's retries every pass (audit a6), so a pod deleted
    meanwhile held its node's room for ever."""
    sched = scheduler(broken=True)
    waiting(kube, sched, ["a-stuck", "b-gone"], 4)
    assert all(sched.schedule_once().values())
    kube.delete("pods", "b-gone", "default")
    kube.inject("GET", r"/namespaces/default/pods/a-stuck$", 500, count=10_000)
    left_pending(sched)   # else b-gone, read back gone, is pending
    clock.advance(sched.assume_s)
    assert pending(sched) == [] and len(kube.calls("GET", POD_GET)) == 1   # a-stuck, tried once: the pass's last
    assert pending(sched) == [] and sorted(sched._assumed) == ["default/a-stuck"]   # b-gone read back: gone
    assert sched.nodes_view()[0]["gpus_free"] == 4
    for _ in range(3):
        assert pending(sched) == []
    assert len(kube.calls("GET", POD_GET)) == 2   # none again within assume_s
    clock.advance(sched.assume_s)
    assert pending(sched) == [] and len(kube.calls("GET", POD_GET)) == 3 and list(sched._assumed) == [
        "default/a-stuck"]   # tried again, kept


def test_what_a_pod_read_back_says_of_its_binding() -> None:
    assumed = Assumed(100.0, Usage("a", 8, 0, 0, ()), "u1", 100.0)

    def read(node: str | None = "a", uid: str = "u1", phase: str = "Running") -> Assumed | None:
        return read_back(assumed, {"metadata": {"name": "big", "uid": uid}, "spec": {"nodeName": node},
                                   "status": {"phase": phase}}, 200.0)

    assert read_back(assumed, None, 200.0) is None   # gone
    assert read(node=None) is None and read(uid="u2") is None   # on no node; another pod of its name
    assert read(phase="Succeeded") is None and read(phase="Failed") is None   # finished: holds nothing
    assert read() == assumed._replace(checked=200.0)   # on its node: kept, read at 200
    assert read(node="b") == assumed._replace(usage=assumed.usage._replace(node="b"), checked=200.0)   # moved
    assert read_back(assumed._replace(uid=""), {"spec": {"nodeName": "a"}}, 200.0) is not None   # uid unknown
