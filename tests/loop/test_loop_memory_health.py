"""GPUs with unhealthy memory (an uncorrectable ECC error since the reset, a row remap pending or failed) never
receive work from the planners, and a fleet that reports no memory health at all is planned as before."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from loop_helpers import make_fleet, snapshot, workload
from test_loop_reconciler import cycles, hot_sim, loop_for

from balancer.config import BalancerPolicy
from balancer.model import Migrate
from balancer.plan.capacity import view_from_snapshot
from balancer.plan.planner import PlannerState, plan

FL = make_fleet(3, 4)  # n0: GPUs 0-3, n1: 4-7, n2: 8-11 (A100: slowdown 89 C)
A100 = "A100-SXM4-80GB"


def unhealthy(*gpus: int) -> np.ndarray:
    mask = np.zeros(FL.n_gpus, dtype=bool)
    mask[list(gpus)] = True
    return mask


def hot_plan(mask: np.ndarray, temps=None):
    snap = snapshot(FL, workloads=[(workload("svc-0"), (0,))], temps=temps or {0: 86, 8: 40, 4: 50})
    snap = snap.replace(memory_unhealthy=mask)
    state, out = PlannerState(), None
    for _ in range(2):  # two hot readings make the hotspot active
        out, state = plan(snap, None, BalancerPolicy(), state)
    return out


def targets(p) -> set[int]:
    return {g for a in p.actions if isinstance(a, Migrate) for g in a.target_gpus}


def test_a_snapshot_without_memory_health_counts_every_gpu_healthy():
    snap = snapshot(FL)
    assert snap.memory_unhealthy.dtype == bool and not snap.memory_unhealthy.any()
    assert targets(hot_plan(unhealthy())) == {8}      # the coolest GPU, as before


def test_the_coolest_gpu_with_unhealthy_memory_is_passed_over_for_the_next_coolest():
    assert targets(hot_plan(unhealthy(8))) == {4}


def test_with_every_cool_gpu_unhealthy_the_hot_gpu_is_throttled_not_moved():
    p = hot_plan(unhealthy(*range(4, 12)))
    assert targets(p) == set()
    # n0 is the last node with a healthy GPU: the hot taint leaves it open (`hotspot_detect.kept_open`)
    assert sorted(a.kind for a in p.actions) == ["power_limit"]
    assert any("n0 kept open" in n for n in p.notes)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.booleans(), min_size=12, max_size=12), st.integers(0, 11),
       st.lists(st.floats(35, 80), min_size=12, max_size=12))
def test_no_migration_ever_targets_a_gpu_with_unhealthy_memory(mask, hot, temps):
    t = dict(enumerate(temps))
    t[hot] = 88.0
    snap = snapshot(FL, workloads=[(workload("svc-0"), (hot,)), (workload("svc-1", milli=500), (hot,))], temps=t)
    snap = snap.replace(memory_unhealthy=np.array(mask))
    state = PlannerState()
    for _ in range(2):
        p, state = plan(snap, None, BalancerPolicy(), state)
    assert not targets(p) & set(np.flatnonzero(mask).tolist())


def test_the_capacity_planner_neither_lends_nor_counts_gpus_with_unhealthy_memory():
    snap = snapshot(FL, workloads=[(workload("svc-0"), (0,))])
    assert view_from_snapshot(snap, {}).free == {A100: 11}
    view = view_from_snapshot(snap.replace(memory_unhealthy=unhealthy(0, 5, 9)), {})
    assert view.free == {A100: 9}                   # GPU 0 is busy anyway; 5 and 9 leave the idle pool
    assert view.total_gpus == 9


def test_the_loop_keeps_migrating_off_a_hot_node_but_never_onto_a_gpu_after_an_ecc_error():
    sim = hot_sim()
    bad = [10, 11]                                 # two of n2's idle GPUs had double-bit errors
    for g in bad:
        sim.ecc_error(g)
    rec, _ = loop_for(sim)
    reports = cycles(sim, rec, 15)
    assert {r.status for r in reports} == {"ok"}
    moved = [r.action for rep in reports for r in rep.results if isinstance(r.action, Migrate)]
    assert moved and not {g for a in moved for g in a.target_gpus} & set(bad)
