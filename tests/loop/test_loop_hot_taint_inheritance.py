"""A hot taint outlives the controller that set it: a restarted controller (or a new leader) keeps its predecessor's
taint with the same hysteresis as one it set itself, so a GPU in the warm band between the cool and hot lines keeps
its node closed until it has had `coolReadings` cool readings, instead of the node opening after `hotReadings`
readings, filling up and going hot again on every restart."""

from __future__ import annotations

from dataclasses import replace

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import TaintNode
from balancer.plan.planner import PlannerState, acknowledge, plan

FL = make_fleet(3, 4)  # n0: GPUs 0-3, n1: 4-7, n2: 8-11 (A100: slowdown 89 C: hot from 84 C, cool under 77 C)
HOT, WARM, COOL = 86.0, 80.0, 60.0
M = BalancerPolicy().hotspots.cool_readings
N = BalancerPolicy().hotspots.hot_readings
TAINTED_N0 = [replace(FL.nodes[0], taints=("gputide.io/hot=true:NoSchedule",)), *FL.nodes[1:]]


def reading(t0: float, tainted: bool = True, t1: float | None = None):
    """GPU 0 (busy, on n0) at `t0`, GPU 1 (idle, on n0) at `t1` if given; n0 carrying gputide's hot taint as the node
    list reads it."""
    temps = {0: t0} if t1 is None else {0: t0, 1: t1}
    return snapshot(FL, workloads=[(workload("svc-0"), (0,))], temps=temps,
                    nodes=TAINTED_N0 if tainted else FL.nodes)


def removals(p) -> list[str]:
    return [a.node for a in p.actions if isinstance(a, TaintNode) and a.remove]


CASES = {
    "a GPU in the warm band keeps the inherited taint however long it stays there": ([WARM] * (3 * (N + M)), None),
    "a GPU still hot keeps it": ([HOT] * (3 * (N + M)), None),
    "coolReadings cool readings remove it, no sooner": ([COOL] * M, M - 1),
    "warm, then cool, then warm again: the cool readings count again from nothing":
        ([WARM] * 5 + [COOL] * (M - 1) + [WARM] * 5 + [COOL] * M, 10 + 2 * M - 2),
}


@pytest.mark.parametrize("temps, removed_at", CASES.values(), ids=CASES.keys())
def test_a_restarted_controller_keeps_an_inherited_taint_until_the_node_has_cooled(temps, removed_at):
    state = PlannerState()   # a new process, or a replica that has just become the leader: no memory
    seen = []
    for i, t0 in enumerate(temps):
        p, state = plan(reading(t0), None, BalancerPolicy(), state)
        seen += [i] * len(removals(p))
        assert "n0" not in removals(p) or i == removed_at, f"reading {i} at {t0} C removed the taint"
    assert seen == ([] if removed_at is None else [removed_at])


def test_a_running_controller_removes_its_own_taint_once_the_gpu_that_set_it_has_cooled():
    """Unchanged for a controller that saw the hotspot: it knows which GPU set the taint, so another GPU of the node
    sitting warm (GPU 1 here) does not hold it."""
    state = PlannerState()
    for _ in range(N):
        p, state = plan(reading(HOT, tainted=False), None, BalancerPolicy(), state)
    assert ("n0", False) in [(a.node, a.remove) for a in p.actions if isinstance(a, TaintNode)]
    state = acknowledge(state, p.actions, reading(HOT, tainted=False))
    for _ in range(5):   # the hot GPU in the warm band stays an active hotspot: the taint stays
        p, state = plan(reading(WARM), None, BalancerPolicy(), state)
        assert not removals(p)
    for i in range(M):
        p, state = plan(reading(COOL, t1=WARM), None, BalancerPolicy(), state)
        assert removals(p) == (["n0"] if i == M - 1 else [])
