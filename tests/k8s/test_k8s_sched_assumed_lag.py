"""A binding the bound-pod cache has not shown yet stays assumed on its node for as long as that cache's watch is
broken, as kube-scheduler keeps an assumed pod until its informer shows it: the 30 s limit is for a healthy watch
that shows bindings within moments (and a pod that finished before it could). Before, an API server that failed the
bound pods' list and watch while it still answered bindings (a large LIST rejected under load, a small POST served)
left the cache without the binding after 30 s, and the next pod was bound onto the GPUs the first one held: the
kubelet rejected it there. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node, pod
from test_k8s_watch import eventually

from balancer.actuate.k8s_scheduler import SecondaryScheduler

BOUND_LIST = r"/pods\?.*spec\.nodeName%21%3D"   # the bound pods' list and watch (the pending ones select nodeName=)


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def test_a_binding_stays_assumed_while_the_bound_pod_watch_is_broken(kube: FakeKube, api, clock) -> None:
    kube.add(node("a", 8))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock, watch=True, watch_s=1.0).start()
    try:
        eventually(lambda: all(w.synced for w in sched.watches.values()))
        kube.inject("GET", BOUND_LIST, 500, count=10_000)   # its watch ends within 1 s, and cannot start again
        eventually(lambda: sched.watches["bound pods"].failures > 0)
        kube.add(pod("big", gpus=8, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["big"])
        assert sched.schedule_once() == {"default/big": "a"}
        clock.advance(120)   # long past the 30 s a binding is assumed by default
        kube.add(pod("small", gpus=1, scheduler="gputide", phase="Pending"))
        eventually(lambda: [r["pod"] for r in sched.pending()] == ["small"])
        assert sched.schedule_once() == {"default/small": None}   # a's 8 GPUs are big's
        assert "Insufficient nvidia.com/gpu" in sched.reasons["default/small"]
    finally:
        sched.close()

