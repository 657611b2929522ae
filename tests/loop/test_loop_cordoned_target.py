"""A node cordoned (`spec.unschedulable`) before the node lifecycle controller has added its taint
(node.kubernetes.io/unschedulable:NoSchedule) is no migration target: kube-scheduler's NodeUnschedulable filter and
the actuator (`k8s_migrate.placement_refusal`) refuse it, so `k8s_nodes.node_meta` gives it the cordon's taint."""

from __future__ import annotations

from dataclasses import replace

from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate.k8s_filters import CORDON
from balancer.actuate.k8s_nodes import node_meta
from balancer.config import BalancerPolicy
from balancer.model import Migrate
from balancer.noderules import NO_RULES, NodeRules
from balancer.plan.planner import plan

FL = make_fleet(3, 4)   # n0: GPUs 0-3, n1: 4-7, n2: 8-11
TEMPS = {0: 86, 8: 35, 9: 35, 4: 45, 5: 45}   # n2 is the coolest target, n1 the next
TAINT = {"key": CORDON.key, "effect": CORDON.effect}


def k8s_node(name: str, *, cordoned: bool = False, taints: tuple[dict, ...] = ()) -> dict:
    spec: dict = {"taints": list(taints)}
    if cordoned:
        spec["unschedulable"] = True
    return {"metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}}, "spec": spec}


def nodes_from(by_name: dict[str, dict]) -> tuple:
    """FL's nodes with the labels and taints `node_meta` reads from their Node objects."""
    out = []
    for n in FL.nodes:
        meta = node_meta(by_name.get(n.name, k8s_node(n.name)))
        out.append(replace(n, labels=meta.labels, taints=meta.taints))
    return tuple(out)


def targets(nodes: tuple, rules: NodeRules = NO_RULES) -> list[str]:
    snaps = [snapshot(FL, workloads=[(workload("svc-0", node_rules=rules), (0,))], temps=TEMPS, nodes=nodes)] * 2
    state = None
    for s in snaps:
        p, state = plan(s, None, BalancerPolicy(), state)
    return [a.target_node for a in p.actions if isinstance(a, Migrate)]


def test_a_cordoned_node_the_lifecycle_controller_has_not_tainted_yet_is_no_migration_target():
    assert targets(nodes_from({})) == ["n2"]   # uncordoned, the coolest node takes the hot pod
    assert targets(nodes_from({"n2": k8s_node("n2", cordoned=True)})) == ["n1"]
    tolerant = NodeRules.from_pod_spec({"tolerations": [{"key": CORDON.key, "operator": "Exists"}]})
    assert targets(nodes_from({"n2": k8s_node("n2", cordoned=True)}), tolerant) == ["n2"]   # as kube-scheduler


def test_the_cordon_taint_is_added_once_and_only_to_a_cordoned_node():
    assert node_meta(k8s_node("a", cordoned=True)).taints == (str(CORDON),)
    assert node_meta(k8s_node("a", cordoned=True, taints=(TAINT,))).taints == (str(CORDON),)   # no duplicate
    assert node_meta(k8s_node("a", taints=(TAINT,))).taints == (str(CORDON),)   # uncordoned since: still tainted
    assert node_meta(k8s_node("a")).taints == ()
