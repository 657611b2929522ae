"""`reserved_for_others` sums the holds `_counted` keeps (review s33h24): it repeated `_counted`'s filter (not the
pod's own, counting against it), so the two could drift apart. The answers are the same (tests/k8s/
test_k8s_sched_hold_gang_extended_recreated.py pins them against a per-resource reference); this pins the one filter,
and fails on the old code."""

from __future__ import annotations

from test_k8s_hold_priority import request, view

from balancer.actuate import k8s_filters
from balancer.actuate.k8s_filters import GPUS, reserved_for_others

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
