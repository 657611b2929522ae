"""A starving pod that asks MIG instances (`nvidia.com/mig-<profile>`, the device plugin's mixed strategy) and no
whole GPU holds the node closest to fitting its MIG request. `closest_to_fitting` ranked every starving pod by whole
GPUs free: such a pod held a node with whole GPUs free and none of its profile, rather than the one a slice short of
it, and was told "0 GPUs reserved". Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node, pod
from test_k8s_starvation import held, most_free

from balancer.actuate.k8s_preempt import closest_to_fitting
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import rfc3339

SLICE = "nvidia.com/mig-1g.10gb"


def mig_node(name: str, gpus: int, slices: int) -> dict:
    """A node with `gpus` whole GPUs and one GPU cut into `slices` 1g.10gb instances."""
    n = node(name, gpus)
    for part in ("capacity", "allocatable"):
        n["status"][part][SLICE] = str(slices)
    return n


def using(name: str, node_name: str | None, *, gpus: int = 0, slices: int = 0, scheduler: str | None = None,
          phase: str = "Running") -> dict:
    p = pod(name, gpus=gpus, node_name=node_name, scheduler=scheduler, phase=phase)
    if slices:
        p["spec"]["containers"][0]["resources"]["limits"][SLICE] = str(slices)
    return p


def test_a_starving_mig_pod_holds_the_node_closest_to_fitting_its_slices(kube: FakeKube, api, clock):
    """a: 7 whole GPUs free, its 7 slices all used; b: no whole GPU free, 1 of its 7 slices free. A pod asking 2
    slices fits nowhere; b is a slice short of it, a two: b is held (a was, for its whole GPUs)."""
    kube.add(mig_node("a", 7, 7))
    kube.add(mig_node("b", 4, 7))
    kube.add(using("slices-a", "a", slices=7))
    kube.add(using("whole-b", "b", gpus=4))
    kube.add(using("slices-b", "b", slices=6))
    small = using("small", None, slices=2, scheduler="gputide", phase="Pending")
    small["metadata"]["creationTimestamp"] = rfc3339(clock.now - 11 * 60)
    kube.add(small)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/small": None}
    assert sched.starving == [("default/small", "b")]
    assert held(kube, "b")["default/small"]["extended"][SLICE] == 2
    assert f"Waiting 11 min: holding b (2 {SLICE} reserved) as they free up there." in sched.reasons["default/small"]
    kube.delete("pods", "slices-b", "default")
    assert sched.schedule_once() == {"default/small": "b"}


def _node(name: str, gpus_free: int, slices: dict[str, float], holds: dict | None = None) -> dict:
    return dict(name=name, gpus_total=8, gpus_free=gpus_free, cpu_milli_total=64000, memory_mib_total=262144,
                extended_total={k: 7.0 for k in slices} | {"pods": 110.0}, extended_free=dict(slices),
                reservations=holds or {})


def _req(**extended: float) -> dict:
    return {"name": "d/p", "owned": frozenset({"d/p"}), "priority": 0, "num_gpu": 0, "cpu_milli": 1000,
            "memory_mib": 1024, "extended": {**extended, "pods": 1.0}}


def test_closest_to_fitting_weighs_the_slices_asked_less_those_held_for_others():
    wide, narrow = "nvidia.com/mig-1g.10gb", "nvidia.com/mig-3g.40gb"
    req = _req(**{wide: 3.0})
    nodes = [_node("a", 8, {wide: 0.0}), _node("b", 0, {wide: 2.0}), _node("c", 0, {wide: 1.0})]
    assert closest_to_fitting(req, nodes) == "b"
    # b's 2 free slices are held for a pod as important: c, a slice free, is closer
    hold = {"d/q": {"pod": "d/q", "count": 0, "priority": 5, "extended": {wide: 2}}}
    nodes[1] = _node("b", 0, {wide: 2.0}, hold)
    assert closest_to_fitting(req, nodes) == "c"
    # two profiles: the fewest instances lacking, then the most free
    req = _req(**{wide: 1.0, narrow: 1.0})
    nodes = [_node("a", 8, {wide: 3.0, narrow: 0.0}), _node("b", 0, {wide: 1.0, narrow: 0.0}),
             _node("c", 0, {wide: 0.0, narrow: 0.0})]
    assert closest_to_fitting(req, nodes) == "a"
    nodes[2] = _node("c", 0, {wide: 0.0, narrow: 1.0})   # lacks one 1g, as a and b lack one 3g: a has most free
    assert closest_to_fitting(req, nodes) == "a"
    nodes[0] = _node("a", 8, {wide: 0.0, narrow: 0.0})   # lacks two
    assert closest_to_fitting(req, nodes) == "c"
