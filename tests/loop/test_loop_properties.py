"""Planner and safety invariants on random fleets and workloads (hypothesis).

Whatever the fleet, the temperatures and the workloads: after applying every planned action in order to the
snapshot's placements, no GPU's milli-GPUs or memory is over-committed, every migration had a target with room
reserved before its source was released, no protected or non-movable workload moved, power limits stay within
the GPU's range, and the safety review never accepts more than its budgets allow.
"""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from loop_helpers import make_fleet, snapshot, workload

from balancer import catalog
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.model import Migrate, ScaleTraining, SetPowerLimit, WorkloadClass
from balancer.plan.planner import plan
from balancer.safety import SafetyGuard, SafetyLedger

MODELS = ["A100-SXM4-80GB", "H100-SXM", "L40S"]


@st.composite
def fleets(draw):
    nodes = draw(st.integers(2, 5))
    per = draw(st.integers(1, 4))
    models = [draw(st.sampled_from(MODELS)) for _ in range(nodes)]
    fl = make_fleet(nodes, per, models=models)
    n = fl.n_gpus
    milli = np.zeros(n, int)
    mem = np.zeros(n)
    cap = np.array([catalog.get(g.model).memory_mib for g in fl.gpus])
    placed = []
    for i in range(draw(st.integers(1, n + 2))):
        g = draw(st.integers(0, n - 1))
        m = draw(st.sampled_from([250, 500, 1000]))
        gib = draw(st.sampled_from([4096, 16384, 30000]))
        if milli[g] + m > 1000 or mem[g] + gib > cap[g]:
            continue
        milli[g] += m
        mem[g] += gib
        cls = draw(st.sampled_from(list(WorkloadClass)))
        placed.append((workload(f"w{i}-0", cls, owner=f"o{i % 4}", milli=m, mem=gib,
                                protected=draw(st.booleans()) and draw(st.booleans()),
                                movable=draw(st.booleans()) or draw(st.booleans()),
                                elastic_min=1, priority=draw(st.sampled_from([5, 100]))), (g,)))
    temps = {g: draw(st.floats(30, 70)) for g in range(n) if draw(st.booleans())}
    busy = sorted({gpus[0] for _, gpus in placed}) or [0]
    for g in draw(st.lists(st.sampled_from(busy), max_size=2)):
        temps[g] = draw(st.floats(84, 95))
    return fl, placed, temps


def check_plan(fl, snap, actions):
    n = fl.n_gpus
    placements = dict(snap.placements)
    wl = snap.workload_by_name
    for a in actions:
        if isinstance(a, Migrate):
            w = wl[a.workload]
            assert not w.protected and w.movable, f"touched {w.name}"
            assert placements[a.workload] == a.source_gpus
            assert not set(a.target_gpus) & set(a.source_gpus)
            placements[a.workload] = a.target_gpus
        elif isinstance(a, SetPowerLimit):
            spec = catalog.get(fl.gpus[a.gpu].model)
            assert spec.min_power_limit_w <= a.watts <= spec.tdp_w
        elif isinstance(a, ScaleTraining):
            members = [w for w in snap.workloads if w.owner == a.job]
            assert not any(w.protected for w in members)
        milli = np.zeros(n)
        mem = np.zeros(n)
        for name, gpus in placements.items():
            milli[list(gpus)] += wl[name].gpu_milli
            mem[list(gpus)] += wl[name].gpu_memory_mib
        cap = np.array([catalog.get(g.model).memory_mib for g in fl.gpus])
        assert (milli <= 1000).all(), "GPU over-committed"
        assert (mem <= np.maximum(cap, snap.mem_used_mib)).all(), "memory over-committed"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets())
def test_plans_never_overcommit_or_touch_protected_work(data):
    fl, placed, temps = data
    snap = snapshot(fl, workloads=placed, temps=temps)
    p, state = plan(snap, None, BalancerPolicy())
    p, state = plan(snap, None, BalancerPolicy(), state)  # second reading: hysteresis satisfied
    event(f"plan has a migration: {any(isinstance(a, Migrate) for a in p.actions)}")
    check_plan(fl, snap, p.actions)
    assert p.objective_after <= p.objective_before
    assert all(a.expected_gain > 0 for a in p.actions)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fleets(), st.integers(0, 4), st.integers(0, 3), st.integers(0, 3))
def test_safety_never_exceeds_its_budgets(data, max_actions, per_node, evictions):
    fl, placed, temps = data
    snap = snapshot(fl, workloads=placed, temps=temps)
    p, state = plan(snap, None, BalancerPolicy())
    p, state = plan(snap, None, BalancerPolicy(), state)
    policy = SafetyPolicy(max_actions_per_cycle=max_actions, max_concurrent_migrations_per_node=per_node,
                          eviction_budget=evictions, min_expected_gain=0.0)
    review = SafetyGuard(policy).review(p.actions, snap, SafetyLedger(), 0.0)
    assert len(review.accepted) <= max_actions
    migrations = [a for a in review.accepted if isinstance(a, Migrate)]
    assert len(migrations) <= evictions
    per = {}
    for m in migrations:
        for node in {fl.gpus[m.source_gpus[0]].node, m.target_node}:
            per[node] = per.get(node, 0) + 1
    assert all(v <= per_node for v in per.values())
    assert not any(snap.workload_by_name[m.workload].protected for m in migrations)
    assert len(review.accepted) + len(review.rejected) == len(p.actions)
