"""Capacity holding for both reasons at once (a profiled service's demand unknown and another's pods unattributed)
says both: a note each and a `gputide_capacity_holding` series each. Before, the unknown demand's note and reason
hid the unattributed pods, and the label switched when the demand came back (GputideCapacityHolding, then by reason,
started its 15 minutes afresh: rules/tests/gputide-capacity-holding_test.yaml pins the alert side)."""

from __future__ import annotations

from dataclasses import replace

from prometheus_client import CollectorRegistry

from balancer.metrics import ControllerMetrics
from balancer.model import ServiceStatus
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.planner import PlannerState
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_demand_unknown import WHY, Fleet


def both():
    """chat's demand unknown; embed reports a replica but owns no pod, and chat's pod has no owner."""
    snap = Fleet([1000.0]).snapshot()   # chat unknown
    return snap.replace(
        workloads=tuple(replace(w, owner="") if w.owner == "chat" else w for w in snap.workloads),
        services={"embed": ServiceStatus(name="embed", demand_rps=5.0, p99_latency_s=0.1, slo_latency_s=0.5,
                                         replicas=1)})


def test_both_reasons_are_noted_and_published():
    plan, state = plan_with_capacity(both(), {}, ON, PlannerState(), profiles=PROFILES,
                                     capacity_policy=CapacityPolicy())
    holds = [n for n in plan.notes if n.startswith("capacity holds")]
    assert any("chat" in n and WHY in n for n in holds) and any("no owner" in n and "embed" in n for n in holds), holds
    assert state.capacity_holding == {"inference_demand_unknown", "unattributed_pods"}
    reg = CollectorRegistry()
    m = ControllerMetrics(reg)
    m.set_capacity_holding(state.capacity_holding)
    assert {r: reg.get_sample_value("gputide_capacity_holding", {"reason": r})
            for r in ("inference_demand_unknown", "unattributed_pods")} == {
        "inference_demand_unknown": 1.0, "unattributed_pods": 1.0}
    m.set_capacity_holding(())
    assert reg.get_sample_value("gputide_capacity_holding", {"reason": "unattributed_pods"}) is None
