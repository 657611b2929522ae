"""`reserved_for_others` sums the holds `_counted` keeps (review s33h24): it repeated `_counted`'s filter (not the
pod's own, counting against it), so the two could drift apart. A resource a node does not list (none of it, but any
number of pod slots) was written out in five places; each reader now asks `unlisted_amount`. The answers are the
same (tests/k8s/test_k8s_sched_hold_gang_extended_recreated.py pins them against a per-resource reference); these
pin the one filter (it fails on the old code) and the one reading (behaviour: the old code fails only its import)."""

from __future__ import annotations

import math

from test_k8s_hold_priority import request, view

from balancer.actuate import k8s_filters
from balancer.actuate.k8s_filters import GPUS, Offers, reserved_for_others, unlisted_amount, why_not
from balancer.actuate.k8s_preempt import big_enough

RDMA = "example.com/rdma"
HOLD = {"count": 2, "cpu_milli": 1000, "memory_mib": 1024, "priority": 200, "extended": {RDMA: 1}}


def held_node() -> dict:
    n = view({"ml/a": HOLD | {"pod": "ml/a"}})
    n["gpus_free"], n["extended_free"], n["extended_total"] = 2, {RDMA: 2}, {RDMA: 2}
    return n


def asking(priority: int = 100) -> dict:
    return request(priority) | {"extended": {RDMA: 1}}


def test_reserved_for_others_sums_the_holds_counted_against_the_pod(monkeypatch):
    """One filter for both: whatever `_counted` keeps is what `reserved_for_others` sums."""
    monkeypatch.setattr(k8s_filters, "_counted", lambda node, req: [{"count": 3}, {"count": 4}])
    assert reserved_for_others(held_node(), asking(), GPUS) == 7


def test_a_resource_a_node_does_not_list_reads_alike_everywhere():
    """None of it, except pod slots: any number (the filters, `Offers`, `big_enough`)."""
    assert unlisted_amount("pods") == math.inf and unlisted_amount(RDMA) == 0.0
    bare = view({})
    for resource, fits in (("pods", True), (RDMA, False)):
        req = request(0) | {"extended": {resource: 1}}
        assert (why_not(bare, req) is None) is fits
        assert Offers([bare]).fitting(req).tolist() == ([0] if fits else [])
        assert big_enough(bare, req) is fits
