"""The amounts a starving pod is told its hold reserves (`k8s_holds._amounts_said`), as Kubernetes quantities: bytes
(ephemeral-storage, hugepages-<size>) with the suffix a person writes ("10Gi"), counts whole. They were floats: a
pod asking 10Gi of ephemeral-storage was told "1.07374e+10 ephemeral-storage". Against the fake API server, then
from a pod's spec as the scheduler reads it, then `_quantity_said` itself."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_starvation import most_free, pending

from balancer.actuate.k8s_holds import Holds, _amounts_said, _quantity_said
from balancer.actuate.k8s_reads import scheduling_request
from balancer.actuate.k8s_requests import quantity
from balancer.actuate.k8s_scheduler import SecondaryScheduler


def asking(name: str, requests: dict[str, str], clock) -> dict:
    """A pod asking no GPU, CPU or memory, only `requests` (as requests and limits), pending 11 min."""
    p = pending(name, 0, 11 * 60, clock)
    resources = p["spec"]["containers"][0]["resources"]
    resources["requests"] = dict(requests)
    resources["limits"] = {**resources["limits"], **requests}
    return p


def test_a_starving_pod_is_told_the_bytes_reserved_as_quantities(kube: FakeKube, api, clock):
    """scratch asks 10Gi of ephemeral-storage; a and b have 100Gi each, 95Gi taken: after 11 min it holds one."""
    for name in ("a", "b"):
        n = node(name, 8)
        for field in ("capacity", "allocatable"):
            n["status"][field]["ephemeral-storage"] = "100Gi"
        hog = pod(f"hog-{name}", gpus=0, node_name=name)
        hog["spec"]["containers"][0]["resources"]["requests"]["ephemeral-storage"] = "95Gi"
        kube.add(n)
        kube.add(hog)
    kube.add(asking("scratch", {"ephemeral-storage": "10Gi"}, clock))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/scratch": None}
    why = sched.reasons["default/scratch"]
    assert "(10Gi ephemeral-storage reserved) as they free up there." in why
    assert "e+" not in why


def test_the_amounts_a_pod_asks_are_said_as_it_wrote_them(clock):
    req = scheduling_request(asking("huge", {"hugepages-2Mi": "1536Mi", "ephemeral-storage": "500M",
                                             "rdma/hca": "1"}, clock))
    assert Holds._reserved_said(req) == "500M ephemeral-storage, 1536Mi hugepages-2Mi, 1 rdma/hca"


@pytest.mark.parametrize("resource, amount, said", [
    ("ephemeral-storage", 10 * 2**30, "10Gi"),
    ("ephemeral-storage", 1.5 * 2**30, "1536Mi"),    # the smallest whole number a suffix gives
    ("ephemeral-storage", 5e8, "500M"),
    ("ephemeral-storage", 1024000.0, "1000Ki"),      # rather than 1024k
    ("ephemeral-storage", 4096e6, "4096M"),          # rather than 4000000Ki
    ("ephemeral-storage", 1001.0, "1001"),           # no suffix divides it: the bytes, whole
    ("hugepages-1Gi", 4 * 2**30, "4Gi"),
    ("memory", 8 * 2**30, "8Gi"),
    ("ephemeral-storage", 0.0, "0"),
    ("rdma/hca", 1e6, "1000000"),                    # a count whole, never "1e+06"
    ("nvidia.com/mig-1g.10gb", 2.0, "2"),
    ("cpu", 1.5, "1500m"),                           # a fraction in thousandths, as CPU is said
    ("cpu", 0.5, "500m"),
    ("ephemeral-storage", quantity("1.1111111Gi"), "1193046460"),   # bytes not whole: rounded up, never "1.19305e+09"
    ("ephemeral-storage", 1234567.0001, "1234568"),
    ("ephemeral-storage", quantity("1.3Gi"), "1395864372"),         # never "1395864371200m"
    ("example.com/widget", 1234567.0001, "1234567.0001"),           # a count not whole: in full, never "1.23457e+06"
])
def test_an_amount_is_said_as_a_quantity(resource, amount, said):
    assert _quantity_said(resource, amount) == said


def test_the_amounts_said_sorted_by_resource():
    assert _amounts_said({"rdma/hca": 2.0, "ephemeral-storage": 10 * 2**30}) == "10Gi ephemeral-storage, 2 rdma/hca"
    assert _amounts_said({}) == ""
