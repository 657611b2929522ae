"""The node kept open in a heat wave, judged by SOME placed GPU workload's tolerations, not every one's (s33h19, audit
s33a14 of 93d164e). `_takes_work` asked `capacity.schedulable`, which requires every placed workload's rules to pass:
with two dedicated pools (n0, n1 `dedicated=a`, n2 `dedicated=b`, each pool's pods tolerating their own taint) no node
took every pod, none counted open, and a heat wave tainted the whole fleet. Now a node is open where some placed GPU
workload tolerates all its repelling taints but gputide's; a cordon closes it whatever tolerates it (a pod tolerating
every taint must not reopen a cordoned node). A healthy node outside the hot ones with no repelling taint answers
before any workload's rules are read: building them for 20,000 workloads cost 10-20 ms a cycle with one hot node."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balancer.noderules import NodeRules, Toleration
from balancer.plan.hotspot_detect import kept_open
from tests.loop.loop_helpers import workload
from tests.planner.test_planner_hot_taint_last_open import CORDON, HEAT_WAVE, cycles, fleet_snapshot, taints

A = NodeRules(tolerations=(Toleration(key="dedicated", value="a"),))
B = NodeRules(tolerations=(Toleration(key="dedicated", value="b"),))
POOLS = {"n0": ("dedicated=a:NoSchedule",), "n1": ("dedicated=a:NoSchedule",), "n2": ("dedicated=b:NoSchedule",)}
EVERYTHING = NodeRules(tolerations=(Toleration(operator="Exists"),))   # a DaemonSet's: tolerates every taint


def two_pools() -> list:
    return [(workload("a-0", owner="a", node_rules=A), (1,)), (workload("a-1", owner="a", node_rules=A), (5,)),
            (workload("b-0", owner="b", node_rules=B), (9,))]


def test_two_dedicated_pools_keep_the_coolest_node_open():
    p, _ = cycles(HEAT_WAVE, taints=POOLS, workloads=two_pools())
    assert taints(p) == [("n0", False), ("n1", False)]   # was n0, n1 and n2: no node took both pools' pods
    assert any("n2 kept open" in n for n in p.notes)


def test_a_pool_whose_taint_no_placed_pod_tolerates_stays_closed():
    wl = [(workload(f"a-{i}", owner="a", node_rules=A), (g,)) for i, g in enumerate((1, 5))]
    p, _ = cycles(HEAT_WAVE, taints=POOLS, workloads=wl)   # no pod of pool b placed: n2 takes none of them
    assert taints(p) == [("n0", False), ("n2", False)]   # n2, hot and closed by others, is tainted as before
    assert any("n1 kept open" in n for n in p.notes)


def test_a_cordon_closes_a_node_though_a_placed_pod_tolerates_every_taint():
    p, _ = cycles({0: 86.0, 4: 85.0}, taints={"n2": (CORDON,)},
                  workloads=[(workload("agent-0", owner="agent", node_rules=EVERYTHING), (9,))])
    assert taints(p) == [("n0", False)]   # was n0 and n1: the cordoned n2 counted open
    assert any("n1 kept open" in n for n in p.notes)


class Unread(tuple):
    """Workloads that fail the test when read."""

    def __iter__(self):
        pytest.fail("kept_open read the workloads though an untainted healthy node outside `hot` answers")


def test_an_open_node_outside_the_hot_ones_answers_before_any_workload_is_read():
    s = fleet_snapshot({0: 86.0}, workloads=two_pools())
    s = replace(s, workloads=Unread(s.workloads))
    assert kept_open(s, frozenset({"n0"}), frozenset()) is None
