"""Kubernetes' node rules in the controller: a pod moves only where its replacement may run (its tolerations,
node selector and required node affinity against the node's taints and labels), and the guard refuses the rest."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.metrics import rejection_reasons
from balancer.model import Migrate
from balancer.noderules import NO_RULES, NodeRules, Taint, Toleration
from balancer.plan.planner import plan
from balancer.plan.simulate import hot_tainted
from balancer.safety import PlacementRefused, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)   # n0: GPUs 0-3, n1: 4-7, n2: 8-11


def labelled(**by_node) -> tuple:
    """FL's nodes with labels / taints: labelled(n1={"labels": {...}, "taints": ("k=v:NoSchedule",)})."""
    return tuple(replace(n, labels=MappingProxyType(by_node.get(n.name, {}).get("labels", {})),
                         taints=by_node.get(n.name, {}).get("taints", ())) for n in FL.nodes)


def rules(**spec) -> NodeRules:
    return NodeRules.from_pod_spec(spec)


def migrations(nodes, w, temps):
    snaps = [snapshot(FL, workloads=[(w, (0,))], temps=temps, nodes=nodes)] * 2
    state = None
    for s in snaps:
        p, state = plan(s, None, BalancerPolicy(), state)
    return [a for a in p.actions if isinstance(a, Migrate)], p


# n2 is the coolest target, n1 the next: a rule that rules n2 out must send the pod to n1
TEMPS = {0: 86, 8: 35, 9: 35, 4: 45, 5: 45}


@pytest.mark.parametrize(("nodes", "node_rules", "expected"), [
    (labelled(), NO_RULES, "n2"),
    (labelled(n1={"labels": {"zone": "b"}}, n2={"labels": {"zone": "a"}}), rules(nodeSelector={"zone": "b"}), "n1"),
    (labelled(n2={"taints": ("dedicated=team-b:NoSchedule",)}), NO_RULES, "n1"),
    (labelled(n2={"taints": ("dedicated=team-b:NoSchedule",)}),
     rules(tolerations=[{"key": "dedicated", "operator": "Equal", "value": "team-b", "effect": "NoSchedule"}]), "n2"),
    (labelled(n2={"taints": ("dedicated=team-b:PreferNoSchedule",)}), NO_RULES, "n2"),   # only discourages
    (labelled(n1={"labels": {"zone": "b"}}),
     rules(affinity={"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
         {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["b", "c"]}]}]}}}), "n1"),
    (labelled(), rules(nodeSelector={"zone": "b"}), None),   # no node has the label: nowhere to go
], ids=["no-rules", "selector", "untolerated-taint", "tolerated-taint", "prefer-no-schedule", "affinity",
        "unknown-label"])
def test_a_hot_pod_moves_only_to_a_node_its_own_rules_admit(nodes, node_rules, expected):
    moves, p = migrations(nodes, workload("svc-0", node_rules=node_rules), TEMPS)
    assert [m.target_node for m in moves] == ([expected] if expected else [])
    if expected is None:   # it stays, so the hot GPU is throttled instead
        assert "power_limit" in {a.kind for a in p.actions}


def test_the_snapshot_checks_each_distinct_rule_set_once_per_snapshot():
    s = snapshot(FL, nodes=labelled(n1={"labels": {"zone": "b"}}, n2={"taints": ("x:NoExecute",)}))
    zone_b = rules(nodeSelector={"zone": "b"})
    assert s.admits(NO_RULES).tolist() == [True, True, False]
    assert s.admits(zone_b).tolist() == [False, True, False]
    assert s.admits(rules(nodeSelector={"zone": "b"})) is s.admits(zone_b)   # equal rules, one mask
    with pytest.raises(ValueError):
        s.admits(zone_b)[0] = True   # read-only, as every snapshot array


def guard_review(nodes, w, target=8):
    s = snapshot(FL, workloads=[(w, (0,))], nodes=nodes)
    a = Migrate(workload=w.name, source_gpus=(0,), target_gpus=(target,), target_node=FL.gpus[target].node,
                reason="x", expected_gain=1.0)
    return SafetyGuard(BalancerPolicy().safety).review([a], s, SafetyLedger(), now=2000.0)


def test_the_guard_refuses_a_migration_to_a_node_the_workload_may_not_run_on():
    """The chokepoint holds even when a planner (or a person's plan) proposes the move."""
    nodes = labelled(n2={"taints": ("dedicated=team-b:NoSchedule",)})
    review = guard_review(nodes, workload("svc-0"))
    (rejected,) = review.rejected
    assert isinstance(rejected[1], PlacementRefused) and not review.accepted
    assert "dedicated=team-b:NoSchedule" in str(rejected[1]) and "n2" in str(rejected[1])
    assert PlacementRefused.reason in rejection_reasons()
    tolerant = rules(tolerations=[{"key": "dedicated", "operator": "Exists"}])
    assert guard_review(nodes, workload("svc-0", node_rules=tolerant)).accepted


def test_gputides_own_hot_taint_is_recognised_in_kubernetes_spelling():
    """Node taints from the API come as `key=value:Effect`; a restarted controller must see its own."""
    s = snapshot(FL, nodes=labelled(n0={"taints": ("gputide.io/hot=true:NoSchedule",)},
                                    n1={"taints": ("gputide.io/hotter:NoSchedule",)}))
    assert hot_tainted(s) == {"n0"}


@pytest.mark.parametrize(("toleration", "taint", "expected"), [
    (Toleration("dedicated", "Equal", "b", "NoSchedule"), "dedicated=b:NoSchedule", True),
    (Toleration("dedicated", "Equal", "a", "NoSchedule"), "dedicated=b:NoSchedule", False),   # wrong value
    (Toleration("dedicated", "Exists"), "dedicated=b:NoExecute", True),                      # any value, effect
    (Toleration("dedicated", "Exists", effect="NoExecute"), "dedicated=b:NoSchedule", False),  # wrong effect
    (Toleration("", "Exists"), "anything=x:NoSchedule", True),                              # tolerates all
    (Toleration("", "Equal"), "anything=x:NoSchedule", False),                             # empty key, Equal
    (Toleration("gpu"), "gpu", True),                                                       # no value, no effect
])
def test_tolerations_follow_kubernetes(toleration, taint, expected):
    assert NodeRules(tolerations=(toleration,)).tolerates(Taint.parse(taint)) is expected


@pytest.mark.parametrize("text", ["k", "k=v", "k:NoExecute", "example.com/k=v:PreferNoSchedule"])
def test_a_taint_reads_and_writes_kubectls_syntax(text):
    taint = Taint.parse(text)
    assert Taint.parse(str(taint)) == taint and taint.key == text.split("=")[0].split(":")[0]
    assert taint.effect == (text.split(":")[1] if ":" in text else "NoSchedule")


# ---- required pod affinity and anti-affinity ------------------------------------------------------------------

HOSTS = {n: {"labels": {"kubernetes.io/hostname": n, "zone": z}} for n, z in (("n0", "a"), ("n1", "b"), ("n2", "a"))}


def affinity(kind: str, app: str, key: str = "kubernetes.io/hostname"):
    from balancer.noderules import PodAffinity

    return PodAffinity.from_spec("inference", {"affinity": {kind: {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": app}}, "topologyKey": key}]}}})


def app(name: str, label: str, **kw):
    return workload(name, labels=MappingProxyType({"app": label}), **kw)


def moves_with(others, w, temps=TEMPS):
    snaps = [snapshot(FL, workloads=[(w, (0,)), *others], temps=temps, nodes=labelled(**HOSTS))] * 2
    state = None
    for s in snaps:
        p, state = plan(s, None, BalancerPolicy(), state)
    return [a.target_node for a in p.actions if isinstance(a, Migrate)], snaps[0]


def test_a_replica_spread_one_per_host_never_moves_next_to_another_replica():
    spread = affinity("podAntiAffinity", "web")
    targets, _ = moves_with([(app("web-1", "web", pod_affinity=spread), (9,))],
                            app("web-0", "web", pod_affinity=spread))
    assert targets == ["n1"]   # n2 is cooler, but web-1 runs there


def test_a_running_pods_anti_affinity_keeps_a_pod_it_selects_off_its_node():
    targets, _ = moves_with([(app("db-0", "db", pod_affinity=affinity("podAntiAffinity", "web")), (9,))],
                            app("web-0", "web"))
    assert targets == ["n1"]
    targets, _ = moves_with([(app("db-0", "db", pod_affinity=affinity("podAntiAffinity", "other")), (9,))],
                            app("web-0", "web"))
    assert targets == ["n2"]   # a term that does not select web-0 keeps nothing off


def test_a_pod_with_zone_affinity_moves_within_the_zone_of_what_it_follows():
    follows = affinity("podAffinity", "cache", key="zone")
    targets, _ = moves_with([(app("cache-0", "cache"), (5,))], app("web-0", "web", pod_affinity=follows))
    assert targets == ["n1"]   # cache-0 runs on n1 (zone b); the cooler n2 is in zone a


def test_the_guard_refuses_a_move_that_breaks_pod_anti_affinity():
    from balancer.safety import PlacementRefused

    spread = affinity("podAntiAffinity", "web")
    w = app("web-0", "web", pod_affinity=spread)
    s = snapshot(FL, workloads=[(w, (0,)), (app("web-1", "web", pod_affinity=spread), (9,))], nodes=labelled(**HOSTS))
    a = Migrate(workload=w.name, source_gpus=(0,), target_gpus=(8,), target_node="n2", reason="x", expected_gain=1.0)
    (rejected,) = SafetyGuard(BalancerPolicy().safety).review([a], s, SafetyLedger(), now=2000.0).rejected
    assert isinstance(rejected[1], PlacementRefused) and "anti-affinity" in str(rejected[1])


def test_two_replicas_spread_one_per_host_are_not_both_proposed_onto_one_host_in_a_cycle():
    # web-0 and web-1 (two owners, so both may move this cycle) run hot on n0; n2 is the coolest host. The first
    # proposal sends one there; the second must see it there and take n1, not also n2.
    spread = affinity("podAntiAffinity", "web")
    temps = {**TEMPS, 1: 85}
    targets, _ = moves_with([(app("web-1", "web", owner="web-b", pod_affinity=spread), (1,))],
                            app("web-0", "web", owner="web-a", pod_affinity=spread), temps)
    assert sorted(targets) == ["n1", "n2"]


def test_a_pod_following_another_follows_it_to_where_it_is_moving_this_cycle():
    # cache-0 (hotter) moves off n0 to n2; web-0 needs a cache pod on its host. n0 will have none once cache-0 has
    # gone, so web-0 may follow it to n2, and must not be kept on n0's reasoning (cache-0 counted on n0).
    follows = affinity("podAffinity", "cache")
    s = snapshot(FL, workloads=[(app("web-0", "web", pod_affinity=follows), (1,)), (app("cache-0", "cache"), (0,))],
                 nodes=labelled(**HOSTS))
    web = s.workload_by_name["inference/web-0"]
    before = s.affinity_admits(web)
    after = s.affinity_admits(web, {"inference/cache-0": s.node_position["n2"]})
    assert before.tolist() == [True, False, False]
    assert after.tolist() == [False, False, True]


def test_the_guard_counts_a_migration_it_accepted_in_the_same_review():
    spread = affinity("podAntiAffinity", "web")
    w0 = app("web-0", "web", owner="web-a", pod_affinity=spread)
    w1 = app("web-1", "web", owner="web-b", pod_affinity=spread)
    s = snapshot(FL, workloads=[(w0, (0,)), (w1, (1,))], nodes=labelled(**HOSTS))
    moves = [Migrate(workload=w.name, source_gpus=(g,), target_gpus=(t,), target_node="n2", reason="x",
                     expected_gain=1.0) for w, g, t in ((w0, 0, 8), (w1, 1, 9))]
    review = SafetyGuard(BalancerPolicy().safety).review(moves, s, SafetyLedger(), now=2000.0)
    assert [a.workload for a in review.accepted] == [w0.name]
    (rejected,) = review.rejected
    assert rejected[0].workload == w1.name and isinstance(rejected[1], PlacementRefused)
    assert "moving there this cycle" in str(rejected[1])
