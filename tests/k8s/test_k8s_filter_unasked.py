"""A resource a pod asks none of never refuses it a node (`k8s_filters.short`), as kube-scheduler's NodeResourcesFit
skips what a pod does not request. The filters compared what is free less what is held for other pods with the pod's
request even where it asked 0: on a node whose GPUs are held for others past what is free there (free less held below
0), a pod asking no GPU was refused ("GPUs reserved for other pods"), though it needs none. A pod asking some still
sees what is held. Against the fake API server, then `why_not` and `Offers` on a node's plain facts."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node
from test_k8s_preemption import bound, pending
from test_k8s_sched_hold_ports_extended import first, with_rdma
from test_k8s_sched_parity import with_port

from balancer.actuate.k8s_filters import Offers, why_not
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION, rfc3339
from balancer.noderules import NO_AFFINITY, NO_RULES

RDMA = "example.com/rdma"


def over_held(kube: FakeKube, clock, **hold) -> None:
    """a: 8 GPUs, 4 taken by low; a Migrate's hold (counting against every pod) of all 8 and `hold`: 4 more GPUs
    held than are free there."""
    a = node("a", 8)
    a["status"]["allocatable"][RDMA] = a["status"]["capacity"][RDMA] = "1"
    a["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps(
        {"default/web": {"gpus": [], "count": 8, "expires": rfc3339(clock.now + 600), **hold}})}
    kube.add(a)
    kube.add(bound("low", "a", 4, 1))


def best_effort(p: dict) -> dict:
    """`p` asking no CPU and no memory."""
    p["spec"]["containers"][0]["resources"].pop("requests")
    return p


def test_a_pod_asking_no_gpu_is_placed_where_every_gpu_is_held_for_another_and_one_asking_a_gpu_is_not(
        kube: FakeKube, api, clock):
    over_held(kube, clock)
    kube.add(pending("cpu-only", 0, 50))
    kube.add(pending("one-gpu", 1, 50))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/cpu-only": "a", "default/one-gpu": None}
    assert "1 node(s) had GPUs reserved for other pods" in sched.reasons["default/one-gpu"]


def test_held_host_ports_and_extended_resources_refuse_only_the_pods_that_ask_them(kube: FakeKube, api, clock):
    """The hold also keeps a host port and more RDMA devices than a has: a 0-GPU pod asking neither is placed there,
    one asking the port or a device is not."""
    over_held(kube, clock, hostPorts=[["TCP", "0.0.0.0", 29500]], extended={RDMA: 2})
    kube.add(pending("plain", 0, 50))
    kube.add(with_port(pending("port", 0, 50), 29500))
    kube.add(with_rdma(pending("rdma", 0, 50)))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/plain": "a", "default/port": None, "default/rdma": None}
    assert "1 node(s) had the requested pod ports reserved for other pods" in sched.reasons["default/port"]
    assert f"1 node(s) had {RDMA} reserved for other pods" in sched.reasons["default/rdma"]


def test_a_pod_asking_no_cpu_nor_memory_is_placed_where_they_are_held_past_what_is_free(kube: FakeKube, api, clock):
    """a has 64 CPUs and 256 GiB: the hold keeps more of both than it has, with its GPUs. A best-effort pod asking
    no GPU is placed there; one asking CPU and memory is not."""
    over_held(kube, clock, cpu_milli=100_000, memory_mib=400_000)
    kube.add(best_effort(pending("best-effort", 0, 50)))
    kube.add(pending("burstable", 0, 50))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/best-effort": "a", "default/burstable": None}
    assert "1 node(s) had cpu reserved for other pods" in sched.reasons["default/burstable"]


def facts(**free) -> dict:
    """Node a's plain facts, each amount below 0 once its hold for ml/other (priority 100) is set aside."""
    node = {"name": "a", "labels": {}, "gpu_model": "H100", "taints": (), "unschedulable": False, "gpus_total": 8,
            "gpus_free": 4, "cpu_milli_total": 16000, "cpu_milli_free": 1000, "memory_mib_total": 65536,
            "memory_mib_free": 1024, "extended_total": {RDMA: 1.0}, "extended_free": {RDMA: 1.0},
            "reservations": {"ml/other": {"count": 8, "cpu_milli": 2000, "memory_mib": 2048, "priority": 100,
                                          "extended": {RDMA: 2}}}}
    return node | free


def request(**asks) -> dict:
    """A pod asking nothing but its pod slot, and `asks`."""
    return {"name": "ml/b", "namespace": "ml", "num_gpu": 0, "cpu_milli": 0, "memory_mib": 0, "rules": NO_RULES,
            "pod_affinity": NO_AFFINITY, "owned": frozenset(), "extended": {"pods": 1.0}, "labels": {},
            "priority": 10} | asks


def answers(node: dict, req: dict) -> tuple[str | None, str | None]:
    """`why_not`'s answer, and `Offers`' (which must agree: None where the node is offered)."""
    offers = Offers([node])
    fitting = offers.fitting(req).tolist()
    assert (fitting == [0]) is (offers.reasons() == [None])
    return why_not(node, req), offers.reasons()[0]


@pytest.mark.parametrize(("node", "asks", "why"), [
    (facts(), {"num_gpu": 1}, "node(s) had GPUs reserved for other pods"),
    (facts(), {"cpu_milli": 1}, "node(s) had cpu reserved for other pods"),
    (facts(), {"memory_mib": 1}, "node(s) had memory reserved for other pods"),
    (facts(), {"extended": {RDMA: 0.5, "pods": 1.0}}, f"node(s) had {RDMA} reserved for other pods"),
    # short of what it has, not only of what is held (below 0: more bound there than it has now)
    (facts(gpus_free=-1, cpu_milli_free=-1, memory_mib_free=-1, extended_free={RDMA: -1.0}), {"num_gpu": 1},
     "Insufficient nvidia.com/gpu"),
    (facts(gpus_free=-1, cpu_milli_free=-1, memory_mib_free=-1, extended_free={RDMA: -1.0}),
     {"extended": {RDMA: 1.0, "pods": 1.0}}, f"Insufficient {RDMA}"),
])
def test_why_not_and_offers_weigh_only_what_the_pod_asks(node, asks, why) -> None:
    """A pod asking none of anything (an amount asked as 0 too: a request built by hand, as `k8s_reads` leaves such
    a resource out) fits a node short of everything; one asking some of a resource is refused for that one."""
    assert answers(node, request()) == (None, None)
    assert answers(node, request(extended={RDMA: 0.0, "pods": 1.0})) == (None, None)
    assert answers(node, request(**asks)) == (why, why)
