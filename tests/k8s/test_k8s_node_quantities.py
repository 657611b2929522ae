"""A node's allocatable CPU and memory are counted as a pod's requests are (`k8s_requests.basic_requests`): the same
quantity on both sides is the same number, so a pod that asks for a node's whole CPU or memory fits it. (The CPU
was truncated, 16380m read 16379 milli-CPUs, and the memory floored while a request was rounded: such a pod was
"Insufficient" for ever.) A malformed reservation entry on a node holds nothing."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler import most_free

from balancer.actuate.k8s_reads import node_facts
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION


@pytest.mark.parametrize(("cpu", "memory"), [("16380m", "64Gi"), ("7.9", "64Gi"), ("1100m", "64Gi"),
                                             ("64", "1000000Ki"), ("64", "1.1G")])
def test_a_pod_that_asks_for_a_nodes_whole_cpu_or_memory_fits_it(kube: FakeKube, api, clock, cpu: str, memory: str):
    kube.add(node("a", 1, cpu=cpu, memory=memory))
    whole = pod("whole", gpus=1, scheduler="gputide", phase="Pending")
    whole["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu, "memory": memory}
    kube.add(whole)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/whole": "a"}, sched.reasons


def test_a_nodes_allocatable_is_read_exactly():
    facts = node_facts(node("a", 8, cpu="16380m", memory="1000000Ki"))
    assert (facts["gpus_total"], facts["cpu_milli_total"], facts["memory_mib_total"]) == (8, 16380, 977)


def test_a_reservation_entry_that_is_no_map_holds_nothing_and_the_pass_goes_on(kube: FakeKube, api, clock):
    """An entry of the reservation annotation that is no JSON map (written by hand: gputide writes maps) holds
    nothing, as the controller reads it (its release_expired removes it); it ended every pass with an
    AttributeError."""
    n = node("a", 2)
    n["metadata"]["annotations"] = {RESERVATION_ANNOTATION: json.dumps({"default/x": 1, "default/y": "all"})}
    kube.add(n)
    kube.add(pod("p", gpus=2, scheduler="gputide", phase="Pending"))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/p": "a"}
