"""The cluster's PodDisruptionBudgets in the safety guard: a migration whose eviction a budget does not allow now
is refused before anything is reserved or tainted for it, counting this cycle's own evictions."""

from __future__ import annotations

from types import MappingProxyType

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.model import DisruptionBudget, Migrate
from balancer.noderules import Selector
from balancer.safety import PdbViolation, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)


def web(i: int, app: str = "web", namespace: str = "inference"):
    return workload(f"{app}-{i}", owner=f"{app}-{i}", namespace=namespace, labels=MappingProxyType({"app": app}))


def budget(allowed: int, app: str = "web", namespace: str = "inference") -> DisruptionBudget:
    return DisruptionBudget(f"{app}-pdb", namespace, Selector.from_json({"matchLabels": {"app": app}}), allowed)


def review(pods, budgets):
    s = snapshot(FL, workloads=[(w, (i,)) for i, w in enumerate(pods)]).replace(disruption_budgets=budgets)
    moves = [Migrate(workload=w.name, source_gpus=(i,), target_gpus=(8 + i,), target_node="n2", reason="x",
                     expected_gain=1.0) for i, w in enumerate(pods)]
    policy = BalancerPolicy(safety=SafetyPolicy(max_concurrent_migrations_per_node=10)).safety
    return SafetyGuard(policy).review(moves, s, SafetyLedger(), now=2000.0)


def test_a_budget_allows_as_many_migrations_as_it_has_disruptions_left_this_cycle():
    r = review([web(0), web(1), web(2)], (budget(2),))
    assert [a.workload for a in r.accepted] == ["inference/web-0", "inference/web-1"]
    (rejected,) = r.rejected
    assert isinstance(rejected[1], PdbViolation)
    assert "inference/web-pdb allows 2 disruption(s) now, 2 of them taken by this cycle's actions" in str(rejected[1])


def test_only_the_pods_a_budget_selects_in_its_namespace_are_held_by_it():
    pods = [web(0), web(1, app="api"), web(2, namespace="other")]
    r = review(pods, (budget(0),))
    assert [a.workload for a in r.accepted] == ["inference/api-1", "inference/web-2"]   # web-2: namespace other
    assert [a.workload for a, _ in r.rejected] == ["inference/web-0"]


def test_a_source_that_cannot_see_budgets_holds_nothing_back():
    assert len(review([web(0), web(1)], None).accepted) == 2


def plan_for(pods_on, temps, budgets):
    from balancer.plan.planner import plan

    s = snapshot(FL, workloads=pods_on, temps=temps).replace(disruption_budgets=budgets)
    state = None
    for _ in range(2):   # two hot readings make a hotspot
        p, state = plan(s, None, BalancerPolicy(), state)
    return p


def test_the_planner_throttles_a_hot_gpu_whose_pod_no_budget_lets_it_move():
    """Proposing the move would only have it refused, every cycle, and leave the GPU hot."""
    p = plan_for([(web(0), (0,))], {0: 86}, (budget(0),))
    assert sorted(a.kind for a in p.actions) == ["power_limit", "taint_node"]
    p = plan_for([(web(0), (0,))], {0: 86}, (budget(1),))
    assert "migrate" in {a.kind for a in p.actions}


def test_the_planner_spends_a_budget_once_per_move_it_proposes():
    p = plan_for([(web(0), (0,)), (web(1), (4,))], {0: 86, 4: 86}, (budget(1),))
    moved = [a.workload for a in p.actions if a.kind == "migrate"]
    throttled = [a.gpu for a in p.actions if a.kind == "power_limit"]
    assert len(moved) == 1 and len(throttled) == 1


def test_a_hot_gpu_whose_move_the_guard_refuses_is_throttled_next_cycle_not_offered_the_same_move():
    """Any refusal (here the eviction budget, which the planner does not see) used to leave the GPU hot for ever: a
    proposed migration counts as relieving it, so no power cap was proposed, and the same move was refused again."""
    from prometheus_client import CollectorRegistry

    from balancer.actuate.dryrun import DryRunActuator
    from balancer.loop import Reconciler
    from balancer.metrics import ControllerMetrics
    from balancer.plan.planner import PlannerState

    snap = snapshot(FL, workloads=[(web(0), (0,))], temps={0: 86})

    class Source:
        def snapshot(self):
            return snap

    clock = [1000.0]
    policy = BalancerPolicy(safety=SafetyPolicy(eviction_budget=0))
    rec = Reconciler(source=Source(), actuator=DryRunActuator(), policy=policy, clock=lambda: clock[0],
                     metrics=ControllerMetrics(CollectorRegistry()))
    kinds = []
    for _ in range(3):
        report = rec.run_once()
        kinds.append(sorted({a.kind for a in report.plan.actions}))
        clock[0] += 30
    assert "migrate" in kinds[1] and "power_limit" not in kinds[1]       # cycle 2: hot, the move is refused
    assert "power_limit" in kinds[2] and "migrate" not in kinds[2]       # cycle 3: throttled instead
    assert isinstance(rec.state, PlannerState) and "inference/web-0" in rec.state.refused_moves
