"""A starving pod that asks no GPU (nor MIG instance) holds the node closest to fitting what it asks: the CPU it
lacks there, then the memory, then the most of both free (`k8s_preempt._closeness`), each less what is held there
for others. `closest_to_fitting` ranked it by whole GPUs free, which it does not use: it held a node with every GPU
free and no CPU rather than the one a core short. And a resource it asks none of rules out no node
(`k8s_filters.short`, as in the filters): a node whose GPUs are held for others past what it has was no node for a
0-GPU pod to hold. Against the fake API server, then `closest_to_fitting` on plain node facts."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node, pod
from test_k8s_starvation import held, most_free, pending

from balancer.actuate.k8s_preempt import closest_to_fitting
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def using(name: str, node_name: str, gpus: int, cores: str) -> dict:
    p = pod(name, gpus=gpus, node_name=node_name)
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cores
    return p


def starving_cpu_job(kube: FakeKube, clock) -> None:
    """cpu-job asks no GPU and 4 CPUs, pending 11 min."""
    p = pending("cpu-job", 0, 11 * 60, clock)
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "4"
    kube.add(p)


def test_a_starving_cpu_only_pod_holds_the_node_closest_to_fitting_its_cpu(kube: FakeKube, api, clock):
    """a: 8 GPUs free, its 8 CPUs all taken (4 short); b: no GPU free, 3 CPUs free (1 short): b is held (a was, for
    its GPUs), and cpu-job gets b once its CPU frees up."""
    for obj in (node("a", 8, cpu="8"), using("hog-a", "a", 0, "8"), node("b", 8, cpu="8"),
                using("gpus-b", "b", 8, "2"), using("hog-b", "b", 0, "3")):
        kube.add(obj)
    starving_cpu_job(kube, clock)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/cpu-job": None}
    assert sched.starving == [("default/cpu-job", "b")]
    assert held(kube, "b")["default/cpu-job"]["cpu_milli"] == 4000
    kube.delete("pods", "hog-b", "default")
    assert sched.schedule_once() == {"default/cpu-job": "b"}


def test_a_starving_pod_asking_no_gpu_holds_a_node_whose_gpus_are_held_past_what_it_has(kube: FakeKube, api, clock):
    """a: two Migrates hold 12 of its 8 GPUs, and it is a core short of cpu-job; b: 4 cores short. a is held (it was
    no candidate: 8 GPUs less 12 held is below cpu-job's 0)."""
    a = node("a", 8, cpu="8")
    a["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps({
        f"default/{w}": {"gpus": [], "count": n, "expires": rfc3339(clock.now + 600)} for w, n in (("web", 8),
                                                                                             ("api", 4))})}
    for obj in (a, using("hog-a", "a", 0, "5"), node("b", 8, cpu="8"), using("hog-b", "b", 0, "8")):
        kube.add(obj)
    starving_cpu_job(kube, clock)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/cpu-job": None}
    assert sched.starving == [("default/cpu-job", "a")]
    kube.delete("pods", "hog-a", "default")
    assert sched.schedule_once() == {"default/cpu-job": "a"}


def facts(name: str, gpus_free: int, cpu_free: int, memory_free: int, holds: dict | None = None) -> dict:
    return dict(name=name, gpus_total=8, gpus_free=gpus_free, cpu_milli_total=16000, cpu_milli_free=cpu_free,
                memory_mib_total=65536, memory_mib_free=memory_free, extended_total={}, extended_free={},
                reservations=holds or {})


def request(gpus: int = 0, cpu: int = 4000, memory: int = 8192) -> dict:
    return {"name": "d/p", "owned": frozenset({"d/p"}), "priority": 0, "num_gpu": gpus, "cpu_milli": cpu,
            "memory_mib": memory, "extended": {"pods": 1.0}}


def test_closest_to_fitting_ranks_a_pod_asking_no_gpu_by_cpu_then_memory_short_then_most_free():
    nodes = [facts("a", 8, 0, 65536), facts("b", 0, 3000, 0), facts("c", 0, 2000, 65536)]
    assert closest_to_fitting(request(), nodes) == "b"             # a core short, however short of memory
    # b's CPU held for a pod as important: c, two cores short and memory to spare, is closer
    nodes[1] = facts("b", 0, 3000, 0, {"d/q": {"pod": "d/q", "count": 0, "cpu_milli": 2000, "priority": 5}})
    assert closest_to_fitting(request(), nodes) == "c"
    nodes = [facts("a", 8, 2000, 4096), facts("b", 0, 2000, 6144), facts("c", 0, 1000, 65536)]
    assert closest_to_fitting(request(), nodes) == "b"             # as short of CPU as a, less of memory
    nodes = [facts("a", 8, 5000, 9000), facts("b", 0, 6000, 8192), facts("c", 0, 6000, 9000)]
    assert closest_to_fitting(request(), nodes) == "c"             # none short: the most CPU, then memory, free
    # a pod asking GPUs is still ranked by GPUs free
    assert closest_to_fitting(request(gpus=8), nodes) == "a"


def test_closest_to_fitting_rules_out_no_node_for_what_the_pod_asks_none_of():
    """a holds 12 of its 8 GPUs, 20 of its 16 CPUs and 80 GiB of its 64 for others: a best-effort pod asking no GPU
    may hold it, one asking a GPU, CPU or memory may not."""
    hold = {"x/web": {"pod": "x/web", "count": 12, "cpu_milli": 20000, "memory_mib": 81920}}
    nodes = [facts("a", 8, 16000, 65536, hold)]
    assert closest_to_fitting(request(cpu=0, memory=0), nodes) == "a"
    for asks in ({"gpus": 1}, {"cpu": 1}, {"memory": 1}):
        assert closest_to_fitting(request(**{"cpu": 0, "memory": 0} | asks), nodes) is None, asks
