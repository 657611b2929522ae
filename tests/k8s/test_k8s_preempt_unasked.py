"""A preemption weighs only what the pod asks (`k8s_preempt.makes_room`, with `k8s_filters.short`), as the filters do
since a resource a pod asks none of no longer refuses it a node: `makes_room` still required the node's GPUs free
less those held for other pods to be at least the pod's 0, so a pod asking no GPU, short of CPU on a node whose GPUs
a Migrate holds past what is free there, preempted no one there (it found no room its victims could make), and a
preemption begun there was given up once such a hold came (its victims "no longer make room for it"), though the
filters would bind it there. Against the fake API server."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node, pdb
from test_k8s_preemption import bound, most_free, pending, reservations

from balancer.actuate.k8s_preempt import makes_room
from balancer.actuate.k8s_reads import Usage
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339


def cpu(p: dict, cores: str) -> dict:
    p["spec"]["containers"][0]["resources"]["requests"]["cpu"] = cores
    return p


def cpu_full(kube: FakeKube) -> None:
    """a: 8 GPUs and 6 CPUs, all taken: gpu-user (100) 4 GPUs and 2 CPUs, low-1 (1) and low-2 (2) no GPU and 2 CPUs
    each. urgent (50) asks no GPU and 4 CPUs: it fits only once low-1 and low-2 are gone."""
    for obj in (node("a", 8, cpu="6"), bound("gpu-user", "a", 4, 100), bound("low-1", "a", 0, 1),
                bound("low-2", "a", 0, 2), cpu(pending("urgent", 0, 50), "4")):
        kube.add(obj)


def migrate_holds_every_gpu(kube: FakeKube, clock) -> None:
    """A Migrate's hold of a's 8 GPUs (held against every pod): 4 more than are free there."""
    a = kube.get("nodes", "a")
    held = json.loads((a["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION, "{}"))
    held["default/web"] = {"gpus": [], "count": 8, "expires": rfc3339(clock.now + 600)}
    kube.mutate("nodes", "a", "", {"metadata": {"annotations": {RESERVATION_ANNOTATION: json.dumps(held)}}})


def test_a_pod_asking_no_gpu_preempts_where_the_gpus_are_held_past_what_is_free(kube: FakeKube, api, clock):
    cpu_full(kube)
    migrate_holds_every_gpu(kube, clock)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sorted(sched.preempted) == [("default/low-1", "a"), ("default/low-2", "a")]
    assert reservations(kube, "a")["default/urgent"]["count"] == 0
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "a"}


def test_a_preemption_of_a_pod_asking_no_gpu_goes_on_once_its_gpus_are_held_for_others(kube: FakeKube, api, clock):
    """low-1 is evicted first (a budget covers it), low-2's eviction is refused once: left for the next pass.
    Meanwhile a Migrate holds a's GPUs: low-2 is evicted all the same (it was spared, the node given back, as if the
    room were taken)."""
    cpu_full(kube)
    kube.add(pdb("guard", "default", {"tier": "batch"}, 1))
    kube.mutate("pods", "low-1", "default", {"metadata": {"labels": {"tier": "batch"}}})
    kube.inject("POST", r"/pods/low-2/eviction$", 429, count=1)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None} and sched.preempted == [("default/low-1", "a")]
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2"]
    migrate_holds_every_gpu(kube, clock)
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [("default/low-2", "a")], sched.reasons["default/urgent"]
    assert "default/urgent" in reservations(kube, "a")
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": "a"}


def test_makes_room_weighs_only_what_the_pod_asks():
    """GPUs free less those held for others: -4; CPU and memory likewise below 0. A victim's CPU and memory make
    room for a pod asking no GPU; a pod asking one GPU, or CPU past what the victim frees, finds none."""
    a = {"name": "a", "gpus_free": 4, "cpu_milli_free": 0, "memory_mib_free": 0, "extended_free": {},
         "reservations": {"x/web": {"count": 8, "cpu_milli": 1000, "memory_mib": 1024}}}
    req = {"name": "d/u", "owned": frozenset({"d/u"}), "priority": 50, "num_gpu": 0, "cpu_milli": 2000,
           "memory_mib": 4096, "extended": {}}
    victim = Usage("a", 0, 3000, 8192, (), key="d/low", priority=1)
    assert makes_room(a, req, [victim])
    assert not makes_room(a, {**req, "num_gpu": 1}, [victim])
    assert not makes_room(a, {**req, "cpu_milli": 2001}, [victim])
    # a best-effort pod asking nothing: room wherever, CPU and memory over-held too
    assert makes_room(a, {**req, "cpu_milli": 0, "memory_mib": 0}, [])
