"""How a migration treats the pod's life on the cluster: a pod already being deleted (an earlier eviction landed, its
replacement on its way) is neither a candidate nor evicted again, which would hold a second target for one
replacement and spend the eviction budget twice."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, node, pdb, pod
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_pods import workload_from_pod
from balancer.actuate.kubernetes import RESERVATION_ANNOTATION

TERMINATING = "2026-12-05T09:00:00Z"


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    """SNAP's: web-1 (Deployment web's) runs on n1; n2 and n3 are free."""
    for name in ("n1", "n2", "n3"):
        kube.add(node(name, 2))
    kube.add(pod("web-1", labels={"app": "web", "pod-template-hash": "5d8f"}, node_name="n1",
                 owner=("ReplicaSet", "web-5d8f")))
    kube.add(pdb("web", "default", {"app": "web"}, allowed=1))
    return kube


@pytest.fixture
def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


def reservations(kube: FakeKube, name: str) -> dict:
    raw = (kube.get("nodes", name)["metadata"].get("annotations") or {}).get(RESERVATION_ANNOTATION)
    return json.loads(raw) if raw else {}


def test_a_pod_being_deleted_is_not_evicted_again(cluster: FakeKube, actuator) -> None:
    """A terminating pod still runs (phase Running) through its grace period: planned again, it was evicted again
    (the Eviction API lets a terminating pod go whatever its budget says) and a second node reserved for its one
    replacement. Refused before anything changes."""
    cluster.mutate("pods", "web-1", "default", {"metadata": {"deletionTimestamp": TERMINATING}})
    result = actuator.apply(migrate(), SNAP)
    assert result.outcome is Outcome.FAILED and "being deleted already" in result.detail, result.detail
    assert not cluster.calls("POST", r"/eviction$")
    assert not [r for r in cluster.requests if r.method == "PATCH"]
    assert reservations(cluster, "n2") == {}


def test_a_pod_being_deleted_is_no_candidate() -> None:
    running = pod("web-1", node_name="n1", owner=("ReplicaSet", "web-5d8f"))
    assert workload_from_pod(running).movable
    running["metadata"]["deletionTimestamp"] = TERMINATING
    assert not workload_from_pod(running).movable
