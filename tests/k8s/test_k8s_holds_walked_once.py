"""What a node holds for other pods is summed in one walk over its holds (review s33h24): `reserved_for_others`
repeated `_counted`'s filter, `usable` walked the holds once per resource (three times), and preemption's candidate
loop walked them again per resource and once more per extended resource the pod asks, for every node that could make
room. Now `reserved_for_others` sums `_counted` and `usable` and the loop use `others_held`'s one walk; a resource a
node does not list (none, but any number of pod slots) is `unlisted_amount` in every reader. The answers are the
same (tests/k8s/test_k8s_sched_hold_gang_extended_recreated.py pins them against a per-resource reference); these
pin the walks, and fail on the old code, which walked more (the unlisted amount is behaviour: the old code fails
only its import)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
from test_k8s_hold_priority import request, view

from balancer.actuate import k8s_filters
from balancer.actuate.k8s_filters import GPUS, Offers, reserved_for_others, unlisted_amount, why_not
from balancer.actuate.k8s_preempt import Preemptor, big_enough, usable
from balancer.actuate.k8s_reads import Usage

RDMA = "example.com/rdma"
HOLD = {"count": 2, "cpu_milli": 1000, "memory_mib": 1024, "priority": 200, "extended": {RDMA: 1}}


class NoBudgets:
    policy = SimpleNamespace(list_pod_disruption_budget_for_all_namespaces=lambda: {"items": []})

    def __call__(self, _what: str, fn, *args, **kwargs):
        return fn(*args, **kwargs)


@pytest.fixture
def walks(monkeypatch) -> list[str]:
    """One entry per hold weighed against a pod (`k8s_filters.counts_against`, which every walk asks)."""
    seen: list[str] = []
    original = k8s_filters.counts_against

    def counting(entry, req):
        seen.append(entry.get("pod", "?"))
        return original(entry, req)

    monkeypatch.setattr(k8s_filters, "counts_against", counting)
    return seen


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


def test_usable_walks_the_holds_once(walks):
    assert usable(held_node(), asking()) == (0, 15000, 64512)
    assert walks == ["ml/a"]


def test_the_preemption_candidate_loop_walks_each_nodes_holds_once(walks):
    """Once to see whether evicting every lower-priority pod could make room, once to weigh the node's victims:
    two walks, whatever the pod asks (seven before: three, then three and one per extended resource)."""
    victim = Usage("a", 6, 1000, 1024, (), key="ml/low", priority=0)
    choice = Preemptor(NoBudgets(), "gputide", "a", lambda: 0.0).plan(asking(), [held_node()], {"a": [victim]})
    assert choice is not None and choice.node == "a" and [v.key for v in choice.victims] == ["ml/low"]
    assert walks == ["ml/a", "ml/a"]


def test_a_resource_a_node_does_not_list_reads_alike_everywhere():
    """None of it, except pod slots: any number (the filters, `Offers`, `big_enough`)."""
    assert unlisted_amount("pods") == math.inf and unlisted_amount(RDMA) == 0.0
    bare = view({})
    for resource, fits in (("pods", True), (RDMA, False)):
        req = request(0) | {"extended": {resource: 1}}
        assert (why_not(bare, req) is None) is fits
        assert Offers([bare]).fitting(req).tolist() == ([0] if fits else [])
        assert big_enough(bare, req) is fits
