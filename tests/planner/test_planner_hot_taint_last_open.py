"""A heat wave must not close the whole fleet. The planner tainted every hot node `gputide.io/hot=true:NoSchedule`;
with every GPU node hot that left no node for any new or restarted pod (an inference replica rescheduled after a node
failure stayed Pending), against the rule that no action leaves a workload without a place to run. Confirmed before
the change: three A100 nodes hot (86, 85, 84.5 C, hot line 84 C) got three taints. Now the hot taint never closes the
last nodes that take GPU work (`hotspot_detect.kept_open`): the coolest hot node (its hottest GPU's margin to
slowdown) stays open, the one already open preferred so the choice does not flap; a gputide taint on it is taken
away and not renewed; nodes others closed (a cordon, a NoSchedule taint) and nodes with no healthy GPU do not count
as open. Per cluster (the snapshot: a shard's own nodes), not per GPU model pool. Migration targets still exclude
it."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from balancer import catalog
from balancer.config import BalancerPolicy
from balancer.model import Migrate, TaintNode
from balancer.plan.planner import RENEW_WITHIN_S, PlannerState, acknowledge, plan
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FL = make_fleet(3, 4)   # A100: slowdown 89 C, hot from 84 C, cool under 77 C; n0: GPUs 0-3, n1: 4-7, n2: 8-11
HOT_TAINT = "gputide.io/hot=true:NoSchedule"
CORDON = "node.kubernetes.io/unschedulable:NoSchedule"
N = BalancerPolicy().hotspots.hot_readings
M = BalancerPolicy().hotspots.cool_readings


def fleet_snapshot(temps: dict[int, float], *, tainted=(), taints=None, fl=FL, time=1000.0, until=None, **kw):
    """GPUs 0, 4, 8 (one per node) at `temps`; `tainted` nodes carry gputide's hot taint (expiring at `until`),
    `taints` {node: other taints}."""
    taints = taints or {}
    nodes = [replace(n, taints=(*taints.get(n.name, ()), *((HOT_TAINT,) if n.name in tainted else ())),
                     hot_until=until if n.name in tainted else None) for n in fl.nodes]
    return snapshot(fl, temps=temps, nodes=nodes, time=time, **kw)


def cycles(temps, n=N, state=None, **kw):
    """`n` plans of the same reading; the last plan and state."""
    state = state or PlannerState()
    for i in range(n):
        p, state = plan(fleet_snapshot(temps, time=1000.0 + 30 * i, **kw), None, BalancerPolicy(), state)
    return p, state


def taints(p) -> list[tuple[str, bool]]:
    return sorted((a.node, a.remove) for a in p.actions if isinstance(a, TaintNode) and not a.renew)


HEAT_WAVE = {0: 86.0, 4: 85.0, 8: 84.5}


def test_every_node_hot_keeps_the_coolest_open():
    p, _ = cycles(HEAT_WAVE)
    assert taints(p) == [("n0", False), ("n1", False)]   # was n0, n1 and n2: no node left for a new pod
    assert any("n2 kept open" in n for n in p.notes)


def test_one_node_cool_every_hot_node_is_tainted():
    p, _ = cycles({0: 86.0, 4: 85.0})
    assert taints(p) == [("n0", False), ("n1", False)]
    assert not any("kept open" in n for n in p.notes)


def test_the_open_node_is_kept_while_it_heats_past_another():
    """n1 hot first is tainted; n2 then the last open: it stays open though n1 becomes the cooler (no flap)."""
    p, state = cycles({0: 86.0, 4: 85.0})
    state = acknowledge(state, p.actions, fleet_snapshot({}))
    p, state = cycles({0: 86.0, 4: 84.2, 8: 87.0}, state=state, tainted={"n0", "n1"})
    assert taints(p) == []
    assert any("n2 kept open" in n for n in p.notes)


def test_a_node_hot_and_tainted_earlier_is_opened_again_the_coolest():
    """Every node carries gputide's taint (an earlier controller's, or before this rule): the coolest is untainted,
    the action says why; the others' taints are renewed, not the open one's."""
    p, _ = cycles(HEAT_WAVE, tainted={"n0", "n1", "n2"}, until=1000.0 + RENEW_WITHIN_S)   # due by the last cycle
    assert taints(p) == [("n2", True)]
    removal = next(a for a in p.actions if isinstance(a, TaintNode) and a.remove)
    assert "kept open" in removal.reason and "4.5 C below slowdown" in removal.reason
    assert sorted(a.node for a in p.actions if isinstance(a, TaintNode) and a.renew) == ["n0", "n1"]


def test_only_open_nodes_count_cordoned_or_tainted_by_others_do_not():
    for closed in (CORDON, "maintenance=true:NoExecute"):
        p, _ = cycles({0: 86.0, 4: 85.0}, taints={"n2": (closed,)})
        assert taints(p) == [("n0", False)], closed
        assert any("n1 kept open" in n for n in p.notes)
    p, _ = cycles({0: 86.0, 4: 85.0}, taints={"n2": ("spot=true:PreferNoSchedule",)})   # n2 still takes pods
    assert taints(p) == [("n0", False), ("n1", False)]


def test_a_node_with_no_healthy_gpu_takes_no_work():
    xid = np.zeros(FL.n_gpus, dtype=np.int64)
    xid[8:12] = 79   # fallen off the bus: n2 takes nothing
    state = PlannerState()
    for i in range(N):
        snap = fleet_snapshot({0: 86.0, 4: 85.0}, time=1000.0 + 30 * i)
        p, state = plan(snap.replace(xid=xid), None, BalancerPolicy(), state)
    assert taints(p) == [("n0", False)]


def test_per_cluster_not_per_model_pool():
    """One node per GPU model: a pool rule would keep each hot node open (its pool's last) and taint nothing."""
    fl = make_fleet(3, 4, models=["A100-SXM4-80GB", "H100-SXM", "L40S"])
    temps = {g: fl_slowdown(fl, g) - 3.0 for g in (0, 4)} | {8: 50.0}
    p, _ = cycles(temps, fl=fl)
    assert taints(p) == [("n0", False), ("n1", False)]
    temps[8] = fl_slowdown(fl, 8) - 4.0
    p, _ = cycles(temps, fl=fl)
    assert taints(p) == [("n0", False), ("n1", False)]
    assert any("n2 kept open" in n for n in p.notes)


def fl_slowdown(fl, g) -> float:
    return catalog.get(fl.gpus[g].model).slowdown_temp_c


def test_kept_open_node_is_tainted_once_another_node_cools():
    p, state = cycles(HEAT_WAVE)
    state = acknowledge(state, p.actions, fleet_snapshot({}))
    cool = {0: 86.0, 4: 60.0, 8: 84.5}
    p, state = cycles(cool, n=M, state=state, tainted={"n0", "n1"})
    assert taints(p) == [("n1", True), ("n2", False)]   # n1 reopens (cooled), so n2 need not stay open


def test_no_migration_onto_the_kept_open_node():
    """The open node's other GPUs are cool and free, but it is hot: the hot GPUs' work is throttled, not moved there."""
    placed = [(workload("svc-0"), (0,)), (workload("svc-1"), (4,))]
    p, _ = cycles(HEAT_WAVE, workloads=placed)
    assert not [a for a in p.actions if isinstance(a, Migrate)]
    assert taints(p) == [("n0", False), ("n1", False)]
