"""A bound-pod watch that fails lists again not older than what it already showed (`resourceVersionMatch=
NotOlderThan`, the last resourceVersion seen, as client-go's reflector relists), and when the API server's cache has
not reached it (504 Too large resource version) or forgot it (410), consistently. Before, it listed again at
`resourceVersion=0`, which a lagging watch cache (another API server behind the same address) serves from before
bindings the watch had shown: a binding dropped once the cache showed it vanished with that list, the pod's GPUs
looked free, and the next pass bound another pod onto them. Against the fake API server (`hold_cache`), with
watches."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_sched_cut_watch import scheduler, waiting  # noqa: F401 - a fixture
from test_k8s_sched_unsure_assumed import BOUND_LIST
from test_k8s_watch import eventually

WATCH = BOUND_LIST + r".*watch=true"


def shown_then_relisted(kube: FakeKube, sched, *, code: int = 500) -> None:
    """big (8 GPUs) bound on a while the watch cache is held before it; the bound-pod cache shows it (the binding no
    more assumed); then that watch fails (`code`) and lists again, the held cache still lagging, and every watch
    after it fails (500): the cache is what the lists made it."""
    kube.hold_cache()
    waiting(kube, sched, ["big"], 8)
    assert sched.schedule_once() == {"default/big": "a"}
    watch = sched.watches["bound pods"]
    eventually(lambda: "default/big" in watch.snapshot()[1])
    assert sched.pending() == [] and "default/big" not in sched._assumed   # shown: assumed no more
    lists = watch.lists
    kube.inject("GET", WATCH, code, count=1)
    kube.inject("GET", WATCH, 500, count=10_000)
    eventually(lambda: watch.lists > lists)


def test_a_relist_after_a_failed_watch_never_shows_less_than_the_watch_did(
        kube: FakeKube, scheduler) -> None:  # noqa: F811
    sched = scheduler(8)
    shown_then_relisted(kube, sched)
    assert "default/big" in sched.watches["bound pods"].snapshot()[1]
    waiting(kube, sched, ["small"], 1)
    assert sched.schedule_once() == {"default/small": None}   # a's 8 GPUs are big's
    assert kube.get("pods", "small", "default")["spec"].get("nodeName") is None


def test_a_relist_after_410_never_shows_less_than_the_watch_did(kube: FakeKube, scheduler) -> None:  # noqa: F811
    sched = scheduler(8)
    served = len(kube.requests)
    shown_then_relisted(kube, sched, code=410)
    assert "default/big" in sched.watches["bound pods"].snapshot()[1]
    waiting(kube, sched, ["small"], 1)
    assert sched.schedule_once() == {"default/small": None}
    bound_lists = [r.query for r in kube.requests[served:]
                   if r.method == "GET" and "nodeName%21%3D" in r.query and "watch=true" not in r.query]
    assert any("resourceVersionMatch=NotOlderThan" in q for q in bound_lists)   # asked first, 504: then consistent
    assert any("resourceVersion=" not in q for q in bound_lists)
