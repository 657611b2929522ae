"""The soak and the live demo read telemetry through Prometheus, with the simulator playing the Kubernetes node
list (`sim_node_meta`): the planner sees the simulated hot taint and its expiry on the snapshot's clock, so it renews
the taint; the soak's actuator forwards the loop's housekeeping (expired taints are removed), keeps renewals out of
its budget check as the guard does, and `TaintWatch` reports a hot taint that lapsed and was written again."""

from __future__ import annotations

import threading
from dataclasses import replace

import pytest

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.base import Outcome
from balancer.actuate.sim import SimActuator
from balancer.app.soak_checks import BudgetCheck, StaleGuard, WorkloadLedger
from balancer.app.soak_harness import ActionLog, CheckedActuator, TaintWatch, sim_node_meta
from balancer.config import BalancerPolicy
from balancer.fleet import scaled_fleet
from balancer.model import ScaleInference, TaintNode
from balancer.sim import SimCluster


@pytest.fixture
def sim():
    return SimCluster(scaled_fleet(16, name="t"), seed=1, step_s=60.0, start_time=1_000_000.0)


def actuator(sim: SimCluster, budget: BudgetCheck, cycle: list[int], taints: TaintWatch | None = None):
    policy = BalancerPolicy()
    return CheckedActuator(SimActuator(sim), threading.Lock(), ledger=WorkloadLedger(sim),
                           stale=StaleGuard(policy.safety), budget=budget, log=ActionLog(),
                           cycle=lambda: cycle[0], taints=taints)


def test_node_meta_carries_the_taint_with_its_expiry_on_the_sources_clock(sim):
    node = sim.fleet.nodes[0].name
    sim.add_taint(node, until=sim.time + 600.0)
    meta = sim_node_meta(sim, threading.Lock(), clock=lambda: 50.0)()
    assert meta[node].hot_until == pytest.approx(650.0)   # 600 s left, on the wall clock the snapshot is stamped with
    assert any(t.startswith("gputide.io/hot") for t in meta[node].taints)
    other = sim.fleet.nodes[1].name
    assert meta[other].hot_until is None and not meta[other].taints


@pytest.mark.parametrize("led", [True, False], ids=["after-a-leader-cycle", "after-a-held-cycle"])
def test_housekeeping_is_forwarded_and_an_expired_then_rewritten_taint_is_a_gap_unless_no_leader_acted(sim, led):
    cycle, watch = [0], TaintWatch(sim)
    act = actuator(sim, BudgetCheck(BalancerPolicy().safety), cycle, watch)
    node = sim.fleet.nodes[0].name
    assert act.apply(TaintNode(reason="hot", node=node), sim.snapshot()).outcome is Outcome.APPLIED
    watch.after_reconcile(0, led, 0)   # a leader acting normally would have renewed it in this cycle
    sim.advance_to(sim.time + HOT_TAINT_TTL_S + 60.0)
    assert act.housekeeping() == [f"{node}: hot taint expired"]
    assert not sim.has_taint(node)
    act.apply(TaintNode(reason="hot", node=node), sim.snapshot())
    watch.after_reconcile(1, True, 1)
    assert bool(watch.check.breaches) is led
    if led:
        assert node in watch.check.breaches[0][1]


def test_a_renewed_taint_outliving_the_ttl_is_checked_without_a_breach(sim):
    cycle, watch = [0], TaintWatch(sim)
    act = actuator(sim, BudgetCheck(BalancerPolicy().safety), cycle, watch)
    node = sim.fleet.nodes[0].name
    act.apply(TaintNode(reason="hot", node=node), sim.snapshot())
    for c in range(1, 8):   # 7 cycles of 5 min, renewed each time: 35 min tainted
        watch.after_reconcile(c - 1, True, c - 1)
        sim.advance_to(sim.time + 300.0)
        cycle[0] = c
        assert act.housekeeping() == []
        act.apply(TaintNode(reason="still hot", node=node, renew=True), sim.snapshot())
    watch.after_reconcile(7, True, 7)
    act.apply(TaintNode(reason="cooled", node=node, remove=True), sim.snapshot())
    watch.after_reconcile(8, True, 8)
    watch.finish()
    assert watch.check.held, watch.check.row()
    assert watch.longest > HOT_TAINT_TTL_S


def test_renewals_are_not_counted_against_the_budgets(sim):
    budget = BudgetCheck(BalancerPolicy().safety)
    act = actuator(sim, budget, [0])
    node = sim.fleet.nodes[0].name
    act.apply(TaintNode(reason="hot", node=node), sim.snapshot())
    for _ in range(BalancerPolicy().safety.max_actions_per_cycle + 2):
        assert act.apply(TaintNode(reason="still hot", node=node, renew=True),
                         sim.snapshot()).outcome is Outcome.APPLIED
    assert budget.check.checked == 1 and not budget.check.breaches


def test_reclaims_count_against_the_per_cycle_limit_but_past_it_are_no_breach(sim):
    budget = BudgetCheck(replace(BalancerPolicy().safety, max_actions_per_cycle=2))
    snap = sim.snapshot()
    for i in range(3):   # the guard never refuses serving capacity added, whatever the limit
        budget.on_applied(0, 0.0, ScaleInference(service=f"s{i}", replicas=2, previous_replicas=1, reason="rise",
                                                 expected_gain=1.0), snap)
    assert not budget.check.breaches and budget.peak["actions_per_cycle"] == 3
    budget.on_applied(0, 0.0, ScaleInference(service="s9", replicas=1, previous_replicas=2, reason="loan",
                                             expected_gain=1.0), snap)
    assert len(budget.check.breaches) == 1   # a loan past the limit is one the guard should have refused
