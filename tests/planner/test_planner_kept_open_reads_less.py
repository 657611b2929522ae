"""`kept_open` stops reading workloads once a node outside the hot ones takes work (s33h22, audit s33a16 of b601a51).
`_takes_work` read the workloads until every node's taint set was answered: a set no placed workload tolerates (a
node of a pool others closed, `dedicated=other`) was never answered, so all 20,000 workloads were read each cycle
(/tmp/s33a16/timing.py: 7.6-11.8 ms) though the first answered a cool node open, and a node outside the hot ones
taking work is all `kept_open` needs to answer None. Pinned without a clock: a workload read after that answer
raises."""

from __future__ import annotations

from types import SimpleNamespace as NS

import numpy as np

from balancer.noderules import NodeRules, Toleration
from balancer.plan import hotspot_detect

GPU = "nvidia.com/gpu=present:NoSchedule"
TOLERATES_GPU = NodeRules(tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists"),))


class Unread:
    """A workload that must not be read."""

    name = "unread"

    @property
    def node_rules(self):
        raise AssertionError("a workload read after a node outside `hot` was found to take work")


def fleet(workloads, hot_first: bool = False) -> NS:
    """n0 `dedicated=other` (no workload tolerates it), n1..n3 the GPU taint every pod tolerates."""
    nodes = [NS(name="n0", taints=(GPU, "dedicated=other:NoSchedule"))] + [NS(name=f"n{i}", taints=(GPU,))
                                                                          for i in (1, 2, 3)]
    return NS(nodes=nodes, workloads=tuple(workloads), placements={w.name: (0,) for w in workloads},
              node_index=np.arange(4), healthy=np.ones(4, dtype=bool))


def test_the_first_workload_that_opens_a_cool_node_ends_the_reading():
    snap = fleet([NS(name="svc-0", node_rules=TOLERATES_GPU), Unread()])
    assert hotspot_detect.kept_open(snap, frozenset({"n1", "n2"}), frozenset()) is None   # n3 takes work


def test_a_hot_node_opened_reads_on_to_find_a_cool_one():
    """Only hot nodes share the GPU-only set: it opens no cool node, so the reading goes on (n0's set unanswered),
    and with none found n1 (the one untainted) is kept open."""
    snap = fleet([NS(name="svc-0", node_rules=TOLERATES_GPU), NS(name="other", node_rules=NodeRules())])
    snap.nodes = snap.nodes[:3]
    snap.node_index, snap.healthy = np.arange(3), np.ones(3, dtype=bool)
    snap.slowdown_temp_c, snap.temperature_c = np.full(3, 89.0), np.array([80.0, 85.0, 86.0])
    assert hotspot_detect.kept_open(snap, frozenset({"n1", "n2"}), frozenset({"n2"})) == "n1"
