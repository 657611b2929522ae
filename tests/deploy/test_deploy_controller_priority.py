"""The controller outranks every workload it protects. Without a priority class it ran at the cluster's default
(usually 0): kube-scheduler preempted it to place any workload of a higher class, and the kubelet evicted it under
node pressure before workloads of a higher class, so a node's hottest hour could be the one the controller was
Pending in. The node agents (the exporter, the power-cap agent) already ran at system-node-critical."""

from __future__ import annotations

import pytest
from test_deploy_manifests import OVERLAYS, controllers, objects, render

# Kubernetes' built-in classes (pkg/apis/scheduling: SystemCriticalPriority = 2e9; node-critical 1000 above it)
BUILT_IN = {"system-cluster-critical": 2_000_000_000, "system-node-critical": 2_000_001_000}
HIGHEST_USER_PRIORITY = 1_000_000_000   # API validation: a PriorityClass a cluster defines goes no higher


def priority(pod: dict, overlay: str) -> int:
    """A pod's priority: a built-in class's value, or that of a PriorityClass the overlay ships (0 otherwise)."""
    name = pod.get("priorityClassName")
    shipped = {o["metadata"]["name"]: o["value"] for o in render(overlay) if o["kind"] == "PriorityClass"}
    return BUILT_IN.get(name, shipped.get(name, 0))


def controller(overlay: str) -> dict:
    """The controller's pod (overlays/sharded: each shard's, and they must agree: test_deploy_shards.py)."""
    pods = [d["spec"]["template"]["spec"] for d in controllers(overlay)]
    assert all(p.get("priorityClassName") == pods[0].get("priorityClassName") for p in pods), overlay
    return pods[0]


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_the_controller_outranks_any_workload_a_cluster_can_define(overlay):
    pod = controller(overlay)
    assert priority(pod, overlay) > HIGHEST_USER_PRIORITY, f"{overlay}: {pod.get('priorityClassName')!r}"


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "overlays/with-dcgm-exporter"])
def test_the_node_agents_still_outrank_the_controller(overlay):
    """A node without its exporter has no readings (the controller holds still there): the controller's class must
    not let it preempt the node agents to be placed."""
    (agents,) = [d for d in objects(overlay, "DaemonSet") if d["metadata"]["name"] == "gputide-exporter"]
    assert priority(agents["spec"]["template"]["spec"], overlay) > priority(controller(overlay), overlay)


@pytest.mark.parametrize("overlay", ["overlays/scheduler", "overlays/dev-scheduler"])
def test_the_secondary_scheduler_outranks_any_workload_too(overlay):
    """Every pod with schedulerName: gputide waits for this scheduler: preempted to place a workload, it would
    leave them all Pending; it runs at the controller's class, below the node agents."""
    (found,) = [d for d in objects(overlay, "Deployment") if d["metadata"]["name"] == "gputide-scheduler"]
    pod = found["spec"]["template"]["spec"]
    assert priority(pod, overlay) > HIGHEST_USER_PRIORITY, f"{overlay}: {pod.get('priorityClassName')!r}"
    assert priority(pod, overlay) == priority(controller(overlay), overlay)
