"""The hotspot planner counts an owner's replicas not running as the guard does (`balancer.unavailable.short_now`,
`hotspots.may_move`): it proposed the migration of a running replica of a service already one down, the guard refused
it (MaxUnavailable), and the hot GPU waited a cycle before it was throttled."""

from __future__ import annotations

import dataclasses

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import ServiceStatus
from balancer.plan import hotspots
from balancer.plan.planner import plan
from balancer.safety import SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)


def status(replicas: int) -> ServiceStatus:
    return ServiceStatus(name="svc", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=replicas,
                         replicas_from_spec=True)


def planned(replicas: int, forgotten: dict[str, int] | None = None):
    pods = [(workload("svc-0"), (0,)), (workload("svc-1"), (4,))]
    s = dataclasses.replace(snapshot(FL, workloads=pods, temps={0: 86}, services={"svc": status(replicas)}),
                            forgotten_nodes=forgotten or {})
    policy, state = BalancerPolicy(), None   # maxUnavailablePerWorkload 1
    for _ in range(2):   # two hot readings make a hotspot
        p, state = plan(s, None, policy, state)
    return s, policy, p


def test_a_service_already_one_down_is_throttled_not_offered_a_move_the_guard_refuses():
    s, policy, p = planned(3)   # 3 asked, 2 running: one down already
    kinds = sorted({a.kind for a in p.actions})
    assert "migrate" not in kinds and "power_limit" in kinds
    assert not hotspots.may_move_now(s, list(s.workloads), policy).any()
    # whole, its hot replica moves, and the guard agrees
    s, policy, p = planned(2)
    moves = [a for a in p.actions if a.kind == "migrate"]
    assert [a.workload for a in moves] == ["inference/svc-0"]
    assert SafetyGuard(policy.safety).review(moves, s, SafetyLedger(), 2000.0).accepted == tuple(moves)
    # a forgotten node may hold the missing replica: the planner excuses it as the guard does
    s, policy, p = planned(3, {"gone": 4})
    moves = [a for a in p.actions if a.kind == "migrate"]
    assert [a.workload for a in moves] == ["inference/svc-0"]
    assert SafetyGuard(policy.safety).review(moves, s, SafetyLedger(), 2000.0).accepted == tuple(moves)
