"""The hot taint a move puts on its source lasts as long as the hold on its target: a StatefulSet's pod given an hour
to stop is replaced (same name) only once it is gone, an hour later; the taint lapsed after its 15 minutes, and the
replacement could land back on the hot node while its target stayed held. Nor does a move cut short a later expiry
already on the node (another move's, for a longer grace period)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from fakeapi import FakeKube, node, pdb, pod
from test_k8s_actuator import SNAP, migrate

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_time import parse_time
from balancer.actuate.kubernetes import HOT_TAINT_KEY, HOT_UNTIL_ANNOTATION, rfc3339
from balancer.model import Workload, WorkloadClass


@pytest.fixture
def cluster(kube: FakeKube) -> FakeKube:
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    kube.add(pod("web-1", labels={"app": "web"}, node_name="n1", owner=("ReplicaSet", "web-5d8f")))
    kube.add(pdb("web", "default", {"app": "web"}, allowed=1))
    return kube


@pytest.fixture
def actuator(api, clock) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock)


def hot_until(kube: FakeKube, name: str) -> float | None:
    return parse_time((kube.get("nodes", name)["metadata"].get("annotations") or {}).get(HOT_UNTIL_ANNOTATION))


def tainted(kube: FakeKube, name: str) -> bool:
    return any(t["key"] == HOT_TAINT_KEY for t in kube.get("nodes", name)["spec"].get("taints") or ())


def test_the_taint_lasts_the_hold_of_a_pod_with_a_long_grace_period(cluster: FakeKube, actuator, clock) -> None:
    cluster.add(pod("db-0", node_name="n1", owner=("StatefulSet", "db")))
    cluster.mutate("pods", "db-0", "default", {"spec": {"terminationGracePeriodSeconds": 3600}})
    snap = replace(SNAP, workloads=(*SNAP.workloads, Workload(name="default/db-0", owner="db",
                                                               workload_class=WorkloadClass.BATCH)),
                   placements={**SNAP.placements, "default/db-0": (1,)})
    assert actuator.apply(migrate(workload="default/db-0", source=(1,), target=(2,)), snap).outcome is Outcome.APPLIED
    assert hot_until(cluster, "n1") == pytest.approx(clock() + 3660, abs=1)   # the hold's: the grace and a minute
    clock.advance(actuator.hot_taint_ttl_s + 1)
    actuator.release_expired()
    assert tainted(cluster, "n1")   # the evicted pod may still be stopping: its replacement does not exist yet
    clock.advance(3660 - actuator.hot_taint_ttl_s)
    assert "n1: hot taint expired" in actuator.release_expired() and not tainted(cluster, "n1")


def test_a_short_hold_leaves_the_taints_own_ttl(cluster: FakeKube, actuator, clock) -> None:
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    assert hot_until(cluster, "n1") == pytest.approx(clock() + actuator.hot_taint_ttl_s, abs=1)


def test_a_move_does_not_cut_a_later_expiry_short(cluster: FakeKube, actuator, clock) -> None:
    later = clock() + 3000
    cluster.mutate("nodes", "n1", "", {"metadata": {"annotations": {HOT_UNTIL_ANNOTATION: rfc3339(later)}},
                                       "spec": {"taints": [{"key": HOT_TAINT_KEY, "value": "true",
                                                            "effect": "NoSchedule"}]}})
    assert actuator.apply(migrate(), SNAP).outcome is Outcome.APPLIED
    assert hot_until(cluster, "n1") == pytest.approx(later, abs=1)
