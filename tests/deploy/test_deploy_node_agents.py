"""The per-node agents (the exporter, and the power-cap agent in its pod) run on every GPU node, tainted ones too:
above all on a node the controller itself tainted hot. A DaemonSet pod is placed by kube-scheduler, which keeps it
off a node with a NoSchedule taint it does not tolerate; a NoSchedule taint does not evict a running pod, so the gap
opens only when the pod is replaced (a rollout, an eviction for node pressure, a deleted pod): from then on the
hottest node has no exporter (no readings, so the controller holds still on it) and no power-cap agent (a power
cap written to it applies nowhere), for as long as it stays tainted. And they are admitted at all where their
priority class is quota-limited (GKE). A hung power-cap agent is restarted: its metrics thread keeps answering
Prometheus, so only its own liveness probe tells."""

from __future__ import annotations

import re

import pytest
from test_deploy_manifests import OVERLAYS, ROOT, one, render

from balancer.actuate.k8s_nodes import NodeAnnotationCaps, taints_change
from balancer.actuate.k8s_requests import quantity
from balancer.actuate.kubernetes import HOT_TAINT_KEY
from balancer.app.health import call_budget_s
from balancer.cli import build_parser
from balancer.cmd._args import parse_interval
from balancer.cmd.power_cap_agent import stall_limit_s
from balancer.noderules import NodeRules, Taint

GPU_NODE_LABELS = {"nvidia.com/gpu.present": "true", "kubernetes.io/hostname": "gpu-1"}


def hot_taint() -> Taint:
    """The taint the controller puts on a hot node, as its actuator writes it."""
    (taint,) = taints_change({"spec": {}}, HOT_TAINT_KEY, True, 0.0)["spec"]["taints"]
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


CRITICAL = {"system-node-critical", "system-cluster-critical"}


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_critical_priority_pods_are_admitted_where_the_class_is_quota_limited(overlay):
    """GKE (and any cluster that limits priority class consumption by default, Kubernetes' ResourceQuota admission
    `limitedResources`) admits a pod of system-node-critical / system-cluster-critical outside kube-system only in a
    namespace with a ResourceQuota whose scope selects that class: without one every exporter pod was refused
    ("insufficient quota to match these scopes") and the DaemonSet ran nowhere."""
    rendered = render(overlay)
    quotas = [q for q in rendered if q["kind"] == "ResourceQuota"]
    for obj in (o for o in rendered if o["kind"] in ("DaemonSet", "Deployment", "StatefulSet")):
        wanted = obj["spec"]["template"]["spec"].get("priorityClassName")
        if wanted not in CRITICAL:
            continue
        scoped = [q for q in quotas if q["metadata"]["namespace"] == obj["metadata"]["namespace"] and any(
            e["scopeName"] == "PriorityClass" and e["operator"] == "In" and wanted in e["values"]
            for e in q["spec"].get("scopeSelector", {}).get("matchExpressions", []))]
        assert scoped, f"{overlay}: {obj['kind']}/{obj['metadata']['name']} ({wanted}) has no quota scoped to it"
        for quota in scoped:   # a budget, not a limit: the number of GPU nodes is the cluster's
            assert quantity(quota["spec"]["hard"]["pods"]) >= 10**6


def power_cap_agents() -> list[tuple[str, dict]]:
    return [(overlay, c) for overlay in OVERLAYS for ds in render(overlay) if ds["kind"] == "DaemonSet"
            for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "power-cap-agent"]


def test_a_hung_power_cap_agent_is_restarted_and_a_healthy_one_is_not():
    """/healthz on the agent's own port fails once no sync has ended for its stall limit at the deployed
    --interval (balancer/cmd/power_cap_agent.py), which covers a sync whose node read runs to its deadline: the
    kubelet restarts it `failureThreshold` probes later, and the manifest's comment gives those figures."""
    found = power_cap_agents()
    assert [overlay for overlay, _ in found] == ["overlays/power-cap"]
    for overlay, agent in found:
        args = build_parser().parse_args(agent["args"])
        assert args.port == next(p["containerPort"] for p in agent["ports"] if p["name"] == "powercap"), overlay
        live, ready = agent["livenessProbe"], agent["readinessProbe"]
        assert live["httpGet"] == {"path": "/healthz", "port": "powercap"}, overlay
        assert ready["httpGet"] == {"path": "/readyz", "port": "powercap"}, overlay
        interval = parse_interval(args.interval)
        read_s = call_budget_s(NodeAnnotationCaps(None, args.node).api)
        limit = stall_limit_s(interval, read_s)
        assert limit > interval + read_s   # a healthy sync never looks stuck
        restart_s = limit + live["failureThreshold"] * live["periodSeconds"]
        assert (interval, limit, restart_s) == (10.0, 60.0, 120.0)
    text = re.sub(r"\s*#\s*", " ", (ROOT / "deploy/components/power-cap/power-cap-agent.yaml").read_text())
    assert "60 s at --interval=10s" in text and "restarted within 2 minutes" in text


def test_the_power_cap_agent_keeps_the_limits_before_its_caps_on_the_node():
    """The limit a GPU ran at before gputide's first cap (an operator's `nvidia-smi -pl 250`) is what a give-back
    restores; kept only in memory, an agent restart (a rollout, an OOM kill) would give the GPU its board default
    instead. The shipped agent writes it to --state-file on a hostPath that outlives the pod, and the flag parses."""
    pod = one("overlays/power-cap", "DaemonSet", "gputide-exporter")["spec"]["template"]["spec"]
    (agent,) = [c for c in pod["containers"] if c["name"] == "power-cap-agent"]
    (path,) = [a.split("=", 1)[1] for a in agent["args"] if a.startswith("--state-file=")]
    (mount,) = [m for m in agent.get("volumeMounts", []) if path.startswith(m["mountPath"].rstrip("/") + "/")]
    assert not mount.get("readOnly", False)
    (volume,) = [v for v in pod["volumes"] if v["name"] == mount["name"]]
    assert volume["hostPath"]["type"] == "DirectoryOrCreate"
    assert build_parser().parse_args(agent["args"]).state_file == path
