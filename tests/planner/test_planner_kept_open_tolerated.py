"""The node kept open in a heat wave: a taint every placed GPU workload tolerates closes no node (s33h13, audit s33a7 of
2154ce8). `_takes_work` counted any `NoSchedule` / `NoExecute` taint but gputide's as closing a node: on GKE, whose GPU
nodes all carry `nvidia.com/gpu=present:NoSchedule` (every GPU pod tolerates it), no node counted as open, `kept_open`
gave None and a heat wave tainted every node again, leaving no place for a rescheduled pod. Now a node's taints are
judged by the placed GPU workloads' tolerations: taints no placed workload tolerates all of still close the node
(`dedicated=other`), as a cordon does whatever tolerates it; with none placed, every repelling taint does. Some
workload, not every (s33h19): test_planner_kept_open_pools.py."""

from __future__ import annotations

from balancer.noderules import NodeRules, Toleration
from tests.loop.loop_helpers import workload
from tests.planner.test_planner_hot_taint_last_open import HEAT_WAVE, cycles, taints

GPU = "nvidia.com/gpu=present:NoSchedule"
TOLERATES_GPU = NodeRules(tolerations=(Toleration(key="nvidia.com/gpu", operator="Exists"),))
EVERY_NODE = {"n0": (GPU,), "n1": (GPU,), "n2": (GPU,)}


def placed(rules: NodeRules = TOLERATES_GPU, *more: tuple) -> list:
    """A pod on a cool GPU of each node (1, 5, 9: the heat wave's GPUs 0, 4, 8 keep no work to move)."""
    return [(workload(f"svc-{i}", owner="svc", node_rules=rules), (g,)) for i, g in enumerate((1, 5, 9))] + list(more)


def test_a_taint_every_gpu_pod_tolerates_leaves_the_coolest_open():
    p, _ = cycles(HEAT_WAVE, taints=EVERY_NODE, workloads=placed())
    assert taints(p) == [("n0", False), ("n1", False)]   # was n0, n1 and n2: the whole fleet closed
    assert any("n2 kept open" in n for n in p.notes)


def test_a_dedicated_taint_its_pods_tolerate_does_not_close_the_node():
    dedicated = NodeRules(tolerations=(Toleration(key="dedicated", value="gpu"),))
    p, _ = cycles(HEAT_WAVE, taints={"n2": ("dedicated=gpu:NoSchedule",)}, workloads=placed(dedicated))
    assert taints(p) == [("n0", False), ("n1", False)]
    assert any("n2 kept open" in n for n in p.notes)


def test_a_taint_no_placed_workload_tolerates_still_closes_the_node():
    other = (workload("batch-0", owner="batch"), (2,))   # tolerates nothing, as the svc pods: dedicated=other closes n2
    p, _ = cycles({0: 86.0, 4: 85.0}, taints={"n2": (GPU, "dedicated=other:NoSchedule")},
                  workloads=placed(TOLERATES_GPU, other))
    assert taints(p) == [("n0", False)]
    assert any("n1 kept open" in n for n in p.notes)


def test_with_no_workload_placed_every_repelling_taint_closes_as_before():
    p, _ = cycles({0: 86.0, 4: 85.0}, taints={"n2": (GPU,)})
    assert taints(p) == [("n0", False)]
    assert any("n1 kept open" in n for n in p.notes)


def test_a_cordon_closes_the_node_though_the_pods_tolerate_the_gpu_taint():
    cordoned = {**EVERY_NODE, "n2": (GPU, "node.kubernetes.io/unschedulable:NoSchedule")}
    p, _ = cycles({0: 86.0, 4: 85.0}, taints=cordoned, workloads=placed())
    assert taints(p) == [("n0", False)]
    assert any("n1 kept open" in n for n in p.notes)
