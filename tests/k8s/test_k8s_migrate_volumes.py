"""The actuator's last check before it evicts a migrating pod honours the node affinity of the PersistentVolumes the
pod mounts, as the planner and the guard do: the workload's node rules in the snapshot are the pod's own ANDed with
its volumes' (`k8s_claims.confined`, read by `KubernetesWorkloads`), checked against the target node as it is now.
A pod whose zonal disk cannot attach on the target is not evicted (its replacement would stay Pending); no API
call more than before."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakeapi import ZONE_LABEL, FakeKube, node, pod
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_claims import confined
from balancer.model import ClusterSnapshot
from balancer.noderules import NO_RULES, NodeRules, Requirement, Term


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    """SNAP's: web-1 (Deployment web's) runs on n1; n2 is the target."""
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f"), labels={"pod-template-hash": "5d8f"}))
    return kube


@pytest.fixture
def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


def in_zone(zone: str) -> tuple[Term, ...]:
    return (Term((Requirement(ZONE_LABEL, "In", (zone,)),)),)


def mounting(rules: NodeRules) -> ClusterSnapshot:
    """SNAP, web-1 with `rules` as `KubernetesWorkloads` settles them."""
    web = next(w for w in SNAP.workloads if w.name == "default/web-1")
    others = tuple(w for w in SNAP.workloads if w.name != web.name)
    return replace(SNAP, workloads=(replace(web, node_rules=rules), *others))


def zones(kube: FakeKube, **by_node: str) -> None:
    for name, zone in by_node.items():
        kube.mutate("nodes", name, "", {"metadata": {"labels": {ZONE_LABEL: zone}}})


def test_a_pod_is_evicted_only_to_a_node_its_disks_attach_on(cluster: FakeKube, actuator) -> None:
    zones(cluster, n1="a", n2="b")
    before = len(cluster.requests)
    result = actuator.apply(migrate(), mounting(confined(NO_RULES, (in_zone("a"),))))
    assert result.outcome is Outcome.FAILED, result.detail
    assert "n2 has labels the node affinity of the PersistentVolumes it mounts does not allow" in result.detail
    assert cluster.get("pods", "web-1", "default") is not None
    assert not [r for r in cluster.requests if r.method != "GET"]
    assert len(cluster.requests) - before == 2   # the pod and the target node, as for any migration
    zones(cluster, n2="a")   # two disks: one in zone a, one that attaches in a or b
    rules = confined(NO_RULES, (in_zone("a"), (*in_zone("a"), *in_zone("b"))))
    assert actuator.apply(migrate(), mounting(rules)).outcome is Outcome.APPLIED
    assert cluster.get("pods", "web-1", "default") is None
