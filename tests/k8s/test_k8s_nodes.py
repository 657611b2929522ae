"""Node labels and taints from the Kubernetes API (the fake API server) into the controller's snapshot: where a pod
may move, the emergency-stop label, gputide's own hot taint."""

from __future__ import annotations

import time

import pytest
from fakeapi import FakeKube, node, pod

from balancer.actuate.k8s_nodes import KubernetesNodes, node_meta
from balancer.actuate.k8s_workloads import workload_from_pod
from balancer.config import BalancerPolicy
from balancer.errors import TelemetryUnavailable
from balancer.model import TaintNode
from balancer.noderules import Taint
from balancer.safety import EmergencyStop, SafetyGuard, SafetyLedger
from tests.telemetry.test_telemetry_prometheus_unit import FakeClient, source


def tainted(n: dict, *taints: dict) -> dict:
    n["spec"]["taints"] = list(taints)
    return n


def test_a_node_object_becomes_its_labels_and_taints_in_kubectl_syntax():
    n = tainted(node("g1", labels={"zone": "b"}), {"key": "gputide.io/hot", "value": "true", "effect": "NoSchedule"},
                {"key": "nvidia.com/gpu", "effect": "NoExecute"})
    meta = node_meta(n)
    assert meta.labels["zone"] == "b" and meta.labels["nvidia.com/gpu.product"] == "H100"
    assert meta.taints == ("gputide.io/hot=true:NoSchedule", "nvidia.com/gpu:NoExecute")
    assert [Taint.parse(t) for t in meta.taints] == [Taint("gputide.io/hot", "true", "NoSchedule"),
                                                     Taint("nvidia.com/gpu", "", "NoExecute")]


def test_without_a_watch_the_nodes_are_listed_once_per_ttl_and_the_last_answer_survives_a_failure(
        kube: FakeKube, api, clock):
    nodes = KubernetesNodes(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    kube.inject("GET", r"/nodes(\?|$)", 503, count=2)   # the list and its one retry
    assert nodes() is None                      # never listed: unknown, not "no labels"
    clock.advance(61)
    kube.add(node("g1", labels={"zone": "a"}))
    first = nodes()
    assert first["g1"].labels["zone"] == "a"
    kube.add(node("g2"))
    assert nodes() is first                     # within the TTL: the same answer, no second list
    down = kube.inject("GET", r"/nodes(\?|$)", 503, count=5)
    clock.advance(61)
    assert nodes() is first                     # API down: the last answer stands
    assert down.remaining == 3                  # the list and its one retry did fail


def test_a_watch_brings_a_label_change_without_listing_again(kube: FakeKube, api):
    kube.add(node("g1"))
    nodes = KubernetesNodes(api, watch=True, watch_s=5)
    try:
        nodes()                                 # starts the watch (and lists once itself meanwhile)
        deadline = time.monotonic() + 10
        while not nodes.watch.synced and time.monotonic() < deadline:
            time.sleep(0.02)
        first = nodes()
        assert "zone" not in first["g1"].labels and nodes() is first   # unchanged: the same object
        kube.mutate("nodes", "g1", "", {"metadata": {"labels": {"zone": "c"}}})
        while nodes()["g1"].labels.get("zone") != "c" and time.monotonic() < deadline:
            time.sleep(0.02)
        assert nodes()["g1"].labels["zone"] == "c"
        lists = [r for r in kube.requests if r.path == "/api/v1/nodes" and "watch=true" not in r.query]
        assert len(lists) <= 2                  # its own first list and the watch's: none per change
    finally:
        nodes.close()


def meta_of(kube: FakeKube, api, clock):
    return KubernetesNodes(api, clock=clock, sleep=lambda s: None)


def test_the_snapshot_carries_the_nodes_labels_and_taints_and_holds_still_until_they_are_known(
        kube: FakeKube, api, clock):
    kube.add(tainted(node("node-a", labels={"zone": "a"}), {"key": "dedicated", "value": "x", "effect": "NoSchedule"}))
    kube.add(node("node-b", labels={"gputide.io/emergency-stop": "true"}))
    kube.inject("GET", r"/nodes(\?|$)", 503, count=2)
    src = source(FakeClient())
    src.node_overrides = meta_of(kube, api, clock)
    with pytest.raises(TelemetryUnavailable, match="nodes not listed"):
        src.snapshot()                          # acting blind to an emergency-stop label is not safe
    clock.advance(120)
    snap = src.snapshot()
    by = {n.name: n for n in snap.nodes}
    assert by["node-a"].labels["zone"] == "a" and by["node-a"].taints == ("dedicated=x:NoSchedule",)
    assert snap.admits(workload_from_pod(pod("p", gpus=1)).node_rules).tolist() == [False, True]
    again = src.snapshot()
    assert again.nodes[0] is snap.nodes[0]      # nothing changed: the labelled nodes are reused
    review = SafetyGuard(BalancerPolicy().safety).review(
        [TaintNode(node="node-b", reason="hot", expected_gain=1.0)], snap, SafetyLedger(), now=2e9)
    assert isinstance(review.rejected[0][1], EmergencyStop)   # the label on the Kubernetes node stops it


def test_a_pod_pinned_to_a_zone_is_movable_within_it_and_carries_its_pod_anti_affinity():
    zoned = pod("z", gpus=1, owner=("ReplicaSet", "z-5c9f"))
    zoned["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "b"}
    w = workload_from_pod(zoned)
    assert w.movable and w.node_rules.selector == (("topology.kubernetes.io/zone", "b"),)
    twin = pod("z2", gpus=1)
    twin["spec"]["nodeSelector"] = {"topology.kubernetes.io/zone": "b"}
    assert workload_from_pod(twin).node_rules is w.node_rules   # one shared rule set per template
    apart = pod("a", gpus=1, owner=("ReplicaSet", "a-5c9f"))
    apart["spec"]["affinity"] = {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "x"}}, "topologyKey": "kubernetes.io/hostname"}]}}
    spread = workload_from_pod(apart)
    assert spread.movable and [t.topology_key for t in spread.pod_affinity.anti] == ["kubernetes.io/hostname"]


def test_a_status_update_that_leaves_labels_and_taints_alone_keeps_the_same_answer(kube: FakeKube, api, clock):
    """Kubelets update their Node's status all the time; the snapshot rebuilds its nodes only on a real change."""
    kube.add(node("g1", labels={"zone": "a"}))
    nodes = KubernetesNodes(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)
    first = nodes()
    kube.mutate("nodes", "g1", "", {"status": {"conditions": [{"type": "Ready", "status": "True"}]}})
    clock.advance(61)
    assert nodes() is first
    kube.mutate("nodes", "g1", "", {"metadata": {"labels": {"zone": "b"}}})
    clock.advance(61)
    assert nodes() is not first and nodes()["g1"].labels["zone"] == "b"


def test_the_snapshot_carries_the_power_caps_gputide_holds_on_each_node(kube: FakeKube, api, clock):
    """What a restarted controller or a new leader gives back: the caps in force, not the give-backs."""
    from balancer.actuate.kubernetes import POWER_CAP_ANNOTATION
    from balancer.plan.hotspots import gputide_caps

    caps = '{"GPU-a0": 300, "GPU-a1": {"restore": 250}, "GPU-b0": 280}'   # GPU-b0 is on node-b, not node-a
    with_caps = node("node-a")
    with_caps["metadata"]["annotations"] = {POWER_CAP_ANNOTATION: caps}
    kube.add(with_caps)
    kube.add(node("node-b"))
    assert dict(node_meta(kube.get("nodes", "node-a")).power_caps) == {"GPU-a0": 300.0, "GPU-b0": 280.0}
    src = source(FakeClient())
    src.node_overrides = meta_of(kube, api, clock)
    snap = src.snapshot()
    assert gputide_caps(snap) == {"GPU-a0": 300.0}   # an entry naming another node's GPU is a stale one
