"""A preemption's hold keeps what the filters check, not only GPUs, CPU and memory. urgent (priority 50) needs 4
GPUs and a host port (or an RDMA device); a is full, so it preempts low-1 there and holds a. The hold said its GPUs,
CPU and memory only: at the next pass thief, as important and older (its scheduling gates lifted only now), needs no
GPU, came first and was bound on a with the port (the device) urgent needs, so urgent could not be bound there and
the room its victim made sat idle. Now the hold names its host ports and extended resources (`k8s_preempt.reserve`),
and a pod it counts against is refused them (`k8s_filters`: "reserved for other pods")."""

from __future__ import annotations

import json

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, pending, reservations
from test_k8s_sched_parity import with_port

from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION


def first(request: dict, nodes: list[dict]) -> str | None:
    return nodes[0]["name"] if nodes else None


def with_rdma(p: dict) -> dict:
    p["spec"]["containers"][0]["resources"]["limits"]["example.com/rdma"] = "1"
    return p


def cluster(kube: FakeKube, rdma: bool = False) -> None:
    a = node("a", 8)
    if rdma:
        a["status"]["allocatable"]["example.com/rdma"] = a["status"]["capacity"]["example.com/rdma"] = "1"
    for obj in (a, bound("low-1", "a", 4, 1), bound("low-5", "a", 4, 5), node("b", 4), bound("vip", "b", 4, 100)):
        kube.add(obj)


def aged(p: dict, created: str) -> dict:
    p["metadata"]["creationTimestamp"] = created
    return p


def preempted(kube: FakeKube, api, clock, urgent: dict) -> SecondaryScheduler:
    kube.add(aged(urgent, "2024-01-01T00:10:00Z"))
    sched = SecondaryScheduler(api, "gputide", first, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None} and sched.preempted == [("default/low-1", "a")]
    clock.advance(5)
    return sched


def test_a_preemptors_host_port_is_held_for_it(kube: FakeKube, api, clock):
    cluster(kube)
    sched = preempted(kube, api, clock, with_port(pending("urgent", 4, 50), 29500))
    held = reservations(kube, "a")["default/urgent"]
    kube.add(aged(with_port(pending("thief", 0, 50), 29500), "2024-01-01T00:00:00Z"))
    assert sched.schedule_once() == {"default/thief": "b", "default/urgent": "a"}   # not on a: held for urgent
    assert held.get("hostPorts") == [["TCP", "0.0.0.0", 29500]]


def test_a_preemptors_extended_resource_is_held_for_it(kube: FakeKube, api, clock):
    cluster(kube, rdma=True)
    sched = preempted(kube, api, clock, with_rdma(pending("urgent", 4, 50)))
    held = reservations(kube, "a")["default/urgent"]
    kube.add(aged(with_rdma(pending("thief", 0, 50)), "2024-01-01T00:00:00Z"))
    assert sched.schedule_once() == {"default/thief": None, "default/urgent": "a"}
    assert "1 node(s) had example.com/rdma reserved for other pods" in sched.reasons["default/thief"]
    assert (held.get("extended") or {}).get("example.com/rdma") == 1.0


def test_a_hold_of_lower_priority_keeps_no_port_from_a_more_important_pod(kube: FakeKube, api, clock):
    """As for GPUs (`counts_against`): vip2 (priority 60) takes the port urgent (50) holds, as kube-scheduler lets a
    more important pod use a lower-priority nomination's room."""
    cluster(kube)
    sched = preempted(kube, api, clock, with_port(pending("urgent", 4, 50), 29500))
    kube.add(with_port(pending("vip2", 0, 60), 29500))
    assert sched.schedule_once() == {"default/vip2": "a", "default/urgent": None}


def test_a_hold_whose_ports_or_resources_are_in_another_form_holds_none_of_them(kube: FakeKube, api, clock):
    """Written by hand or another tool: read leniently, as its other fields (`k8s_filters.well_formed`)."""
    a = node("a", 8)
    a["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps({"default/ghost": {
        "pod": "default/ghost", "count": 0, "priority": 100, "expires": "2999-01-01T00:00:00Z",
        "hostPorts": [["TCP", "0.0.0.0", "29500"], "TCP/29500", None], "extended": ["example.com/rdma"]}})}
    a["status"]["allocatable"]["example.com/rdma"] = a["status"]["capacity"]["example.com/rdma"] = "1"
    kube.add(a)
    kube.add(with_rdma(with_port(pending("p", 1, 0), 29500)))
    assert SecondaryScheduler(api, "gputide", first, clock=clock).schedule_once() == {"default/p": "a"}
