"""The per-node agents (the exporter, and the power-cap agent in its pod) run on every GPU node, tainted ones too:
above all on a node the controller itself tainted hot. A DaemonSet pod is placed by kube-scheduler, which keeps it
off a node with a NoSchedule taint it does not tolerate; a NoSchedule taint does not evict a running pod, so the gap
opens only when the pod is replaced (a rollout, an eviction for node pressure, a deleted pod): from then on the
hottest node has no exporter (no readings, so the controller holds still on it) and no power-cap agent (a power
cap written to it applies nowhere), for as long as it stays tainted."""

from __future__ import annotations

import pytest
from test_deploy_manifests import OVERLAYS, one

from balancer.actuate.k8s_actuator import _taints_change
from balancer.actuate.kubernetes import HOT_TAINT_KEY
from balancer.noderules import NodeRules, Taint

GPU_NODE_LABELS = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": "gpu-1"}


def hot_taint() -> Taint:
    """The taint the controller puts on a hot node, as its actuator writes it."""
    (taint,) = _taints_change({"spec": {}}, HOT_TAINT_KEY, True, 0.0)["spec"]["taints"]
    return Taint.from_json(taint)


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "overlays/with-dcgm-exporter"])
@pytest.mark.parametrize("taint", [
    hot_taint(),
    Taint("nvidia.com/gpu", "present", "NoSchedule"),     # GKE's GPU node pools, and the GPU operator's advice
    Taint("sku", "gpu", "NoSchedule"),                    # AKS GPU node pools
    Taint("dedicated", "team-a", "NoSchedule"),           # a GPU pool kept for one team
], ids=str)
def test_the_node_agents_run_on_a_tainted_gpu_node(overlay, taint):
    pod = one(overlay, "DaemonSet", "gputide-exporter")["spec"]["template"]["spec"]
    assert NodeRules.from_pod_spec(pod).refusal("gpu-1", GPU_NODE_LABELS, [taint]) is None


@pytest.mark.parametrize("overlay", ["base", "overlays/power-cap"])
def test_the_node_agents_stay_off_nodes_without_gpus_and_leave_a_draining_node(overlay):
    """Tolerating NoSchedule taints does not widen where they run (the node selector keeps them on GPU nodes), and a
    NoExecute taint (a node being emptied) still removes them."""
    rules = NodeRules.from_pod_spec(one(overlay, "DaemonSet", "gputide-exporter")["spec"]["template"]["spec"])
    assert rules.refusal("cpu-1", {"kubernetes.io/hostname": "cpu-1"}, []) is not None
    assert rules.refusal("gpu-1", GPU_NODE_LABELS, [Taint("maintenance", "true", "NoExecute")]) is not None
