"""The actuator's last check before it evicts a migrating pod reads a cordon as kube-scheduler does: from the target
node's `spec.unschedulable`, not only from the `node.kubernetes.io/unschedulable` taint the node lifecycle
controller adds later. A node cordoned in between was a move's target: the pod was evicted, and its replacement
refused there by kube-scheduler's NodeUnschedulable filter. A pod that tolerates the cordon's taint (as
kube-scheduler lets it) still moves there."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, node, pod
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome, Refused
from balancer.actuate.k8s_actuator import KubernetesActuator


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    """SNAP's: web-1 (Deployment web's) runs on n1; n2, the target, is cordoned and not tainted yet."""
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f"), labels={"pod-template-hash": "5d8f"}))
    kube.mutate("nodes", "n2", "", {"spec": {"unschedulable": True}})
    return kube


@pytest.fixture
def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


@pytest.mark.parametrize("toleration", [
    {"key": "node.kubernetes.io/unschedulable", "operator": "Exists", "effect": "NoSchedule"},
    {"operator": "Exists"},
], ids=["cordon-taint", "everything"])
def test_a_pod_is_not_evicted_towards_a_node_cordoned_before_its_taint_unless_it_tolerates_the_cordon(
        cluster: FakeKube, actuator, toleration) -> None:
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.FAILED and result.refused is Refused.TARGET, result.detail
    assert "n2 has been cordoned (spec.unschedulable)" in result.detail, result.detail
    assert cluster.get("pods", "web-1", "default") is not None
    assert not [r for r in cluster.requests if r.method != "GET"]
    cluster.mutate("pods", "web-1", "default", {"spec": {"tolerations": [toleration]}})   # as kube-scheduler admits
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    assert cluster.get("pods", "web-1", "default") is None
