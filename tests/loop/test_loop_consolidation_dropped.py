"""A consolidation move the planner keeps never relies on CPU or memory that a move it dropped was to free.

The engine (`plan_consolidation`) plans each GPU's moves on the state the earlier GPUs' moves left; the planner then
simulates them GPU by GPU and drops those that cost more than they gain. Here pod a (30 CPUs) leaves node n0 to
empty GPU 0, and pod d (8 CPUs) goes to n0 to empty GPU 5: d fits on n0 only in the CPU a frees. With a's target
GPU near its headroom, a's move heats it past the hot line and is dropped; d's move was kept anyway, onto a node with
4 CPUs free: its replacement pod could not run there.
"""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer import catalog
from balancer.config import BalancerPolicy
from balancer.model import Migrate
from balancer.plan.planner import plan

ON = BalancerPolicy().with_section("defrag", enabled=True)
FL = make_fleet(nodes=2)   # n0: GPUs 0-3, n1: GPUs 4-7, 64 CPUs each
SLOWDOWN = catalog.get(FL.gpus[0].model).slowdown_temp_c
PODS = [(workload("a-0", owner="a", milli=250, mem=8192, cpu_milli=30000), (0,)),
        (workload("c-0", owner="c", milli=400, mem=8192, cpu_milli=30000), (1,)),
        (workload("b-0", owner="b", milli=500, mem=8192, cpu_milli=1000), (4,)),
        (workload("d-0", owner="d", milli=450, mem=8192, cpu_milli=8000), (5,))]
PODS += [(workload(f"whole-{g}", owner=f"whole{g}"), (g,)) for g in (2, 3, 6, 7)]


def moves(temps):
    snap = snapshot(FL, workloads=PODS, temps=temps)
    p, _ = plan(snap, None, ON)
    return snap, [a for a in p.actions if isinstance(a, Migrate)]


def cpu_left(snap, migrations) -> dict[str, int]:
    """Each node's CPU left once the migrations are done."""
    placements = {**snap.placements, **{m.workload: m.target_gpus for m in migrations}}
    left = {n.name: n.cpu_milli for n in snap.nodes}
    for w in snap.workloads:
        left[snap.gpus[placements[w.name][0]].node] -= w.cpu_milli
    return left


def test_both_gpus_are_emptied_when_both_moves_are_kept():
    snap, kept = moves({4: 50.0, 5: SLOWDOWN - 10})   # GPU 5 too warm a target: a goes to GPU 4
    assert {(m.workload, m.target_gpus) for m in kept} == {("inference/a-0", (4,)), ("inference/d-0", (1,))}
    assert min(cpu_left(snap, kept).values()) >= 0


def test_a_move_that_needs_the_cpu_of_a_dropped_move_is_dropped_too():
    snap, kept = moves({4: SLOWDOWN - 16, 5: SLOWDOWN - 10})   # a's move would heat GPU 4 past the hot line
    assert "inference/a-0" not in {m.workload for m in kept}
    left = cpu_left(snap, kept)
    assert min(left.values()) >= 0, f"a kept move lands on a node without the CPU for it: {left}, {kept}"
