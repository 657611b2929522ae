"""A node's allocatable CPU and memory are read exactly (`k8s_requests.exact_quantity`) and rounded down, a pod's
requests rounded up (`k8s_requests.basic_requests`): a pod that asks for a node's whole CPU, or its whole memory
where that is a whole number of MiB, fits it (the CPU was truncated, 16380m read 16379 milli-CPUs: such a pod was
"Insufficient" for ever), and no node is offered more than it has (memory rounded to the nearest MiB on both sides
let pods of 341.4 MiB fill 1024 MiB three times over). A malformed reservation entry on a node holds nothing."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_scheduler import most_free

from balancer.actuate.k8s_reads import node_facts
from balancer.actuate.k8s_scheduler import SecondaryScheduler
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION


@pytest.mark.parametrize(("cpu", "memory"), [("16380m", "64Gi"), ("7.9", "64Gi"), ("1100m", "64Gi"),
                                             ("64", "1048576Ki"), ("64", "1.5Gi"), ("64", "1073741824"),
                                             ("79e-1", "0.0625Ti")])
def test_a_pod_that_asks_for_a_nodes_whole_cpu_or_memory_fits_it(kube: FakeKube, api, clock, cpu: str, memory: str):
    kube.add(node("a", 1, cpu=cpu, memory=memory))
    whole = pod("whole", gpus=1, scheduler="gputide", phase="Pending")
    whole["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu, "memory": memory}
    kube.add(whole)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/whole": "a"}, sched.reasons


def test_a_nodes_allocatable_is_read_exactly_and_rounded_down():
    facts = node_facts(node("a", 8, cpu="16380m", memory="1000000Ki"))   # 976.5625 MiB
    assert (facts["gpus_total"], facts["cpu_milli_total"], facts["memory_mib_total"]) == (8, 16380, 976)
    facts = node_facts(node("a", 8, cpu="1.5e1", memory="1.1G"))         # 1049.04 MiB
    assert (facts["cpu_milli_total"], facts["memory_mib_total"]) == (15000, 1049)


def test_pods_are_never_counted_smaller_than_they_are_so_no_node_is_overcommitted(kube: FakeKube, api, clock):
    """Three pods of 341.4 MiB (357,984,666 bytes) are 1,024.2 MiB: one more than a 1 GiB node holds, which its
    kubelet refuses (OutOfmemory). Rounded to the nearest MiB, each counted 341 and all three were bound."""
    kube.add(node("a", 3, memory="1Gi"))
    for name in ("p-0", "p-1", "p-2"):
        p = pod(name, gpus=1, scheduler="gputide", phase="Pending")
        p["spec"]["containers"][0]["resources"]["requests"] = {"cpu": "1", "memory": "357984666"}
        kube.add(p)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/p-0": "a", "default/p-1": "a", "default/p-2": None}
    assert "Insufficient memory" in sched.reasons["default/p-2"]


def test_a_pod_asking_within_a_mib_of_a_nodes_whole_memory_waits():
    """The price of rounding both ways (gputide counts MiB): a pod asking for exactly a node's allocatable memory
    where that is no whole number of MiB counts one MiB more than the node offers. Kubernetes' own defaults
    (capacity less reserved memory, in Ki) leave a node's allocatable so; a pod that wants all of it, less its
    daemons' share, is rare, and waiting is the safe direction."""
    facts = node_facts(node("a", 8, memory="1000000Ki"))
    from balancer.actuate.k8s_requests import pod_requests

    whole = pod("whole")
    whole["spec"]["containers"][0]["resources"]["requests"]["memory"] = "1000000Ki"
    assert pod_requests(whole)[2] == facts["memory_mib_total"] + 1


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
