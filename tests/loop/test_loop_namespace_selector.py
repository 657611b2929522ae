"""Pod anti-affinity whose terms select namespaces by their labels (`namespaceSelector`), in the controller's
planning and safety guard: once the namespaces' labels resolve the term, a hot replica moves, never next to a pod
it selects in a selected namespace, while a pod of an unselected namespace does not count; before they are known
it does not move at all."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate.k8s_workloads import with_namespaces
from balancer.config import BalancerPolicy
from balancer.model import Migrate
from balancer.noderules import REQUIRED, PodAffinity
from balancer.plan.planner import plan
from balancer.safety import PlacementRefused, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)   # n0: GPUs 0-3, n1: 4-7, n2: 8-11
HOSTS = {n: {"labels": {"kubernetes.io/hostname": n}} for n in ("n0", "n1", "n2")}
TEMPS = {0: 86, 8: 35, 9: 35, 4: 45, 5: 45}   # n0 hot, n2 the coolest target, n1 the next
NAMESPACES = {"team-a": {"team": "serving"}, "team-b": {"team": "serving"}, "lab": {"team": "research"}}
APART = {"affinity": {"podAntiAffinity": {REQUIRED: [
    {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": "kubernetes.io/hostname",
     "namespaceSelector": {"matchLabels": {"team": "serving"}}}]}}}


def nodes():
    return tuple(replace(n, labels=MappingProxyType(HOSTS[n.name]["labels"])) for n in FL.nodes)


def pod(name: str, namespace: str, app: str, namespaces: Mapping | None = NAMESPACES, spec: dict | None = None):
    """A Workload as `KubernetesWorkloads` hands it out: its terms resolved by `namespaces` (None: not known)."""
    w = workload(name, namespace=namespace, owner=name, labels=MappingProxyType({"app": app}),
                 pod_affinity=PodAffinity.from_spec(namespace, spec or {}))
    return with_namespaces(w, lambda a: a.resolved(namespaces))


def planned(hot, *others):
    """The actions of two planning cycles with `hot` on GPU 0 (n0) and `others` ((workload, gpus), ...)."""
    s = snapshot(FL, workloads=[(hot, (0,)), *others], temps=TEMPS, nodes=nodes())
    state = None
    for snap in (s, s):
        p, state = plan(snap, None, BalancerPolicy(), state)
    return p.actions, s


def targets(actions) -> list[str]:
    return [a.target_node for a in actions if isinstance(a, Migrate)]


@pytest.mark.parametrize(("neighbour_namespace", "target"), [("team-b", "n1"), ("lab", "n2")],
                         ids=["a-selected-namespaces-pod-keeps-it-off", "an-unselected-namespaces-pod-does-not"])
def test_a_replica_spread_by_team_namespaces_moves_but_never_next_to_a_selected_pod(neighbour_namespace, target):
    hot = pod("web-0", "team-a", "web", spec=APART)
    assert hot.movable
    actions, _ = planned(hot, (pod("web-1", neighbour_namespace, "web"), (9,)))
    assert targets(actions) == [target]   # n2 is the coolest, but web-1 runs there


@pytest.mark.parametrize(("namespace", "target"), [("team-a", "n1"), ("lab", "n2")],
                         ids=["selected", "unselected"])
def test_a_running_pods_team_anti_affinity_keeps_only_pods_of_selected_namespaces_off(namespace, target):
    guard = pod("guard-0", "ops", "guard", spec=APART)
    actions, _ = planned(pod("web-0", namespace, "web"), (guard, (9,)))
    assert targets(actions) == [target]


def test_before_the_namespaces_are_known_the_pod_does_not_move_and_is_throttled_instead():
    hot = pod("web-0", "team-a", "web", namespaces=None, spec=APART)
    assert not hot.movable and hot.pod_affinity.unresolved
    actions, _ = planned(hot)
    assert targets(actions) == [] and "power_limit" in {a.kind for a in actions}


def test_the_guard_refuses_a_move_next_to_a_pod_of_a_selected_namespace():
    hot = pod("web-0", "team-a", "web", spec=APART)
    _, s = planned(hot, (pod("web-1", "team-b", "web"), (9,)))
    a = Migrate(workload=hot.name, source_gpus=(0,), target_gpus=(8,), target_node="n2", reason="x",
                expected_gain=1.0)
    (rejected,) = SafetyGuard(BalancerPolicy().safety).review([a], s, SafetyLedger(), now=2000.0).rejected
    assert isinstance(rejected[1], PlacementRefused) and "anti-affinity" in str(rejected[1])
