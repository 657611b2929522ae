"""Every kustomize overlay renders, every object validates against the Kubernetes schema, security contexts hold,
and the generated manifests match rules/, dashboards/ and the dcgm counters (RBAC: test_deploy_rbac.py).

kubernetes-validate has no schema for the Prometheus Operator CRDs (ServiceMonitor, PodMonitor,
PrometheusRule): `check_crd_structure` checks their required structure by hand instead.
"""

from __future__ import annotations

import functools
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

kubernetes_validate = pytest.importorskip("kubernetes_validate")

from balancer.cli import build_parser  # noqa: E402
from deploy import gen  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
OVERLAYS = ["base", "overlays/dev", "overlays/production", "overlays/power-cap", "overlays/with-dcgm-exporter",
            "overlays/capacity", "overlays/capacity-kueue", "overlays/scheduler", "overlays/dev-scheduler",
            "overlays/sharded"]
CLUSTER_SCOPED = {"Namespace", "ClusterRole", "ClusterRoleBinding"}
K8S_VERSION = "1.30.0"
CRD_KINDS = {"ServiceMonitor", "PodMonitor", "PrometheusRule"}


@functools.cache
def render(overlay: str) -> tuple[dict, ...]:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with kustomize) not on PATH")
    out = subprocess.run([kubectl, "kustomize", str(ROOT / "deploy" / overlay)], check=True,
                         capture_output=True, text=True, timeout=60).stdout
    return tuple(d for d in yaml.safe_load_all(out) if d)


def render_over(tmp_path: Path, overlay: str, components: tuple[str, ...] = (), **fields) -> list[dict]:
    """An operator's own kustomization over `overlay`, with `components` (names under deploy/components) and any
    other kustomization `fields` (its `namespace:`), rendered."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with kustomize) not on PATH")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump({
        "apiVersion": "kustomize.config.k8s.io/v1beta1", "kind": "Kustomization", **fields,
        "resources": [os.path.relpath(ROOT / "deploy" / overlay, mine)],
        **({"components": [os.path.relpath(ROOT / "deploy" / "components" / c, mine) for c in components]}
           if components else {})}))
    out = subprocess.run([kubectl, "kustomize", str(mine)], check=True, capture_output=True, text=True,
                         timeout=60).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def objects(overlay: str, kind: str) -> list[dict]:
    return [o for o in render(overlay) if o["kind"] == kind]


def one(overlay: str, kind: str, name: str) -> dict:
    return next(o for o in render(overlay) if o["kind"] == kind and o["metadata"]["name"] == name)


def check_crd_structure(obj: dict) -> list[str]:
    problems = []
    if obj.get("apiVersion") != "monitoring.coreos.com/v1":
        problems.append("apiVersion must be monitoring.coreos.com/v1")
    if not obj.get("metadata", {}).get("name"):
        problems.append("metadata.name missing")
    spec = obj.get("spec") or {}
    if obj["kind"] == "PrometheusRule":
        for group in spec.get("groups") or [None]:
            if not isinstance(group, dict) or not group.get("name") or not group.get("rules"):
                problems.append(f"group without name or rules: {group!r:.60}")
                continue
            for rule in group["rules"]:
                if not rule.get("expr") or bool(rule.get("record")) == bool(rule.get("alert")):
                    problems.append(f"rule needs expr and exactly one of record/alert: {rule!r:.60}")
    else:
        endpoints_key = "endpoints" if obj["kind"] == "ServiceMonitor" else "podMetricsEndpoints"
        if not spec.get("selector", {}).get("matchLabels"):
            problems.append("spec.selector.matchLabels missing")
        endpoints = spec.get(endpoints_key) or []
        if not endpoints or not all(e.get("port") for e in endpoints):
            problems.append(f"spec.{endpoints_key} needs entries with a named port")
    return problems


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_overlay_renders_and_every_object_validates(overlay):
    rendered = render(overlay)
    assert {"Namespace", "Deployment", "ClusterRole", "PrometheusRule", "ConfigMap"} <= {o["kind"] for o in rendered}
    for obj in rendered:
        if obj["kind"] in CRD_KINDS:
            assert check_crd_structure(obj) == [], obj["metadata"]["name"]
        else:
            kubernetes_validate.validate(obj, K8S_VERSION, strict=True)


@pytest.mark.parametrize(
    ("broken", "expected"),
    [
        ({"apiVersion": "monitoring.coreos.com/v1", "kind": "PrometheusRule", "metadata": {"name": "x"},
          "spec": {"groups": [{"name": "g", "rules": [{"record": "a", "alert": "b", "expr": "1"}]}]}},
         "exactly one of record/alert"),
        ({"apiVersion": "monitoring.coreos.com/v1", "kind": "ServiceMonitor", "metadata": {"name": "x"},
          "spec": {"selector": {"matchLabels": {"a": "b"}}, "endpoints": [{"path": "/metrics"}]}},
         "named port"),
        ({"apiVersion": "monitoring.coreos.com/v1alpha1", "kind": "PodMonitor", "metadata": {"name": "x"},
          "spec": {"selector": {"matchLabels": {"a": "b"}}, "podMetricsEndpoints": [{"port": "m"}]}},
         "apiVersion"),
    ],
    ids=["a rule both recording and alerting", "an endpoint without a port", "a wrong CRD version"],
)
def test_crd_structure_check_catches_broken_objects(broken, expected):
    assert any(expected in p for p in check_crd_structure(broken))


def test_schema_validation_rejects_a_broken_deployment():
    broken = json.loads(json.dumps(one("base", "Deployment", "gputide-controller")))
    broken["spec"]["replicas"] = "two"
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(broken, K8S_VERSION, strict=True)


def _restricted(container: dict, pod: dict, *, root: bool = False) -> None:
    """Locked down: no privilege, no capability, no escalation, read-only root; non-root unless `root` (then
    uid 0 and still none of the rest)."""
    sc = container.get("securityContext", {})
    assert sc.get("allowPrivilegeEscalation") is False
    assert sc.get("readOnlyRootFilesystem") is True
    assert sc.get("capabilities", {}).get("drop") == ["ALL"] and not sc["capabilities"].get("add")
    assert not sc.get("privileged")
    if root:
        assert sc.get("runAsUser") == 0 and sc.get("runAsNonRoot") is False
    else:
        assert sc.get("runAsNonRoot", pod.get("runAsNonRoot")) is True
    assert sc.get("seccompProfile", pod.get("seccompProfile")) == {"type": "RuntimeDefault"}
    assert container.get("resources", {}).get("requests") and container["resources"].get("limits")


def controllers(overlay: str) -> list[dict]:
    """The controller's Deployments: gputide-controller, or each shard's gputide-controller-NAME
    (overlays/sharded, whose shards are that Deployment but for the shard: test_deploy_shards.py)."""
    found = [d for d in objects(overlay, "Deployment")
             if d["metadata"].get("labels", {}).get("app.kubernetes.io/name") == "gputide-controller"]
    assert found, overlay
    return found


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_controller_is_ha_probed_and_locked_down(overlay):
    for deploy in controllers(overlay):
        pod = deploy["spec"]["template"]["spec"]
        (container,) = pod["containers"]
        assert deploy["spec"]["replicas"] == (1 if overlay.startswith("overlays/dev") else 2)
        assert container["args"][0] == "run" and "--leader-elect" in container["args"]
        for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
            assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}  # the loop's own probes
        assert {"name": "metrics", "containerPort": 9836, "protocol": "TCP"} in container["ports"]
        assert pod["serviceAccountName"] == "gputide-controller"
        _restricted(container, pod["securityContext"])


@pytest.mark.parametrize("overlay", [o for o in OVERLAYS if o != "overlays/with-dcgm-exporter"])
def test_exporter_runs_on_gpu_nodes_and_only_the_power_cap_agent_holds_a_capability(overlay):
    ds = one(overlay, "DaemonSet", "gputide-exporter")
    pod = ds["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.present": "true"}
    assert pod["runtimeClassName"] == "nvidia"
    containers = {c["name"]: c for c in pod["containers"]}
    assert {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"} in containers["exporter"]["env"]
    # root without any capability, only to connect to the kubelet's PodResources socket, its one host path
    exporter = containers["exporter"]
    _restricted(exporter, pod["securityContext"], root=True)
    sock = "--pod-resources-socket=/var/lib/kubelet/pod-resources/kubelet.sock"
    assert sock in exporter["args"]
    host = {v["name"]: v["hostPath"] for v in pod["volumes"] if "hostPath" in v}
    # the power-cap agent's own host folder: the limits before gputide's caps (test_deploy_node_agents.py)
    agent_host = {"power-limits-before": {"path": "/var/lib/gputide/power-cap-agent", "type": "DirectoryOrCreate"}}
    assert host == {"pod-resources": {"path": "/var/lib/kubelet/pod-resources", "type": "Directory"},
                    **(agent_host if overlay == "overlays/power-cap" else {})}
    assert not {m["name"] for m in exporter["volumeMounts"]} & set(agent_host)
    assert {"name": "pod-resources", "mountPath": "/var/lib/kubelet/pod-resources", "readOnly": True} in \
        exporter["volumeMounts"]
    namespace = one(overlay, "Namespace", "gputide")["metadata"]["labels"]
    assert namespace["pod-security.kubernetes.io/enforce"] == "privileged"   # a hostPath is beyond baseline
    assert namespace["pod-security.kubernetes.io/warn"] == "restricted"
    assert pod["automountServiceAccountToken"] is False and "volumeMounts" not in exporter or all(
        m["name"] != "kube-api-access" for m in exporter["volumeMounts"])   # the exporter holds no API token
    if overlay == "overlays/power-cap":
        assert set(containers) == {"exporter", "power-cap-agent"}
        agent = containers["power-cap-agent"]
        assert not agent["securityContext"].get("privileged")   # CAP_SYS_ADMIN only: test_deploy_power_cap_caps.py
        assert any(m["mountPath"] == "/var/run/secrets/kubernetes.io/serviceaccount" for m in agent["volumeMounts"])
        args = build_parser().parse_args(agent["args"])   # the real CLI accepts the container's arguments
        assert args.command == "power-cap-agent" and args.node == "$(NODE_NAME)"
        # it reaches the API server and Prometheus reaches it: the exporter pod's policy allows no egress otherwise
        policy = one(overlay, "NetworkPolicy", "gputide-exporter")["spec"]
        assert {"port": 443, "protocol": "TCP"} in [p for rule in policy["egress"] for p in rule["ports"]]
        assert {"port": args.port, "protocol": "TCP"} in policy["ingress"][0]["ports"]
        endpoints = one(overlay, "PodMonitor", "gputide-exporter")["spec"]["podMetricsEndpoints"]
        port_name = next(p["name"] for p in agent["ports"] if p["containerPort"] == args.port)
        (endpoint,) = [e for e in endpoints if e["port"] == port_name]
        assert {"targetLabel": "job", "replacement": "gputide/gputide-power-cap-agent", "action": "replace"} in \
            endpoint["relabelings"]   # its own job: GputidePowerCapAgentDown, not the exporter's alert
    else:
        assert set(containers) == {"exporter"}
        assert one(overlay, "NetworkPolicy", "gputide-exporter")["spec"]["egress"] == []   # the driver only


def test_with_dcgm_exporter_replaces_our_exporter_with_the_counters_configmap():
    kinds_names = {(o["kind"], o["metadata"]["name"]) for o in render("overlays/with-dcgm-exporter")}
    assert ("DaemonSet", "gputide-exporter") not in kinds_names
    assert ("PodMonitor", "gputide-exporter") not in kinds_names
    counters = one("overlays/with-dcgm-exporter", "ConfigMap", "gputide-dcgm-counters")
    assert counters["metadata"]["namespace"] == "gpu-operator"
    fields = {line.split(",")[0].strip() for line in counters["data"]["dcgm-metrics.csv"].splitlines()
              if line.strip() and not line.startswith("#")}
    contract = set(re.findall(r"`(DCGM_FI_(?:DEV|PROF)_[A-Z_]+)`", (ROOT / "docs" / "metrics.md").read_text()))
    assert contract <= fields


def test_generated_manifests_are_up_to_date():
    assert gen.stale() == [], "run python -m deploy.gen"


def test_prometheus_rule_holds_exactly_the_rules_directory():
    rule = one("base", "PrometheusRule", "gputide-rules")
    assert rule["spec"]["groups"] == gen.rule_groups()
    assert sum(len(g["rules"]) for g in rule["spec"]["groups"]) > 0


def test_dashboard_configmaps_carry_every_dashboard_for_the_grafana_sidecar():
    maps = [o for o in objects("base", "ConfigMap") if o["metadata"].get("labels", {}).get("grafana_dashboard")]
    shipped = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        shipped.update(cm["data"])
    on_disk = {p.name: p.read_text() for p in (ROOT / "dashboards").glob("*.json")}
    assert on_disk and shipped == on_disk


def test_policy_configmap_is_a_valid_balancer_policy():
    from balancer import config

    policy = config.from_dict(yaml.safe_load(one("base", "ConfigMap", "gputide-policy")["data"]["policy.yaml"]))
    assert policy.safety.max_actions_per_cycle == 10
    assert "gputide" in policy.safety.protected_namespaces


@pytest.mark.parametrize("overlay", ["base", "overlays/dev", "overlays/capacity"])
def test_controller_args_parse_with_the_real_cli(overlay):
    from balancer.cli import build_parser

    container = one(overlay, "Deployment", "gputide-controller")["spec"]["template"]["spec"]["containers"][0]
    args = [a.replace("$(POD_NAMESPACE)", "gputide") for a in container["args"]]
    parsed = build_parser().parse_args(args)
    assert parsed.command == "run" and parsed.leader_elect and parsed.metrics_port == 9836
    assert parsed.policy == "/etc/gputide/policy.yaml"
    assert parsed.dry_run is (overlay == "overlays/dev")


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_namespaced_object_names_its_namespace(overlay):
    """A component's resources do not get the base's `namespace:`: without their own, kubectl would create them in
    the context's namespace (the capacity overlay's ServiceProfiles ConfigMap once went to `default`, where the
    controller in `gputide` could not mount it)."""
    allowed = {"gputide", "gpu-operator"}   # gpu-operator: dcgm-exporter's counters ConfigMap
    for obj in render(overlay):
        if obj["kind"] not in CLUSTER_SCOPED:
            assert obj["metadata"].get("namespace") in allowed, (obj["kind"], obj["metadata"]["name"])


def test_the_scheduler_overlay_runs_gputide_schedule_locked_down_as_its_own_service_account():
    from balancer.cli import build_parser

    deploy = one("overlays/scheduler", "Deployment", "gputide-scheduler")
    pod = deploy["spec"]["template"]["spec"]
    (container,) = pod["containers"]
    parsed = build_parser().parse_args([a.replace("$(POD_NAMESPACE)", "gputide") for a in container["args"]])
    assert parsed.command == "schedule" and parsed.leader_elect and parsed.lease_name == "gputide-scheduler"
    assert (parsed.scheduler_name, parsed.policy) == ("gputide", "gputide")
    assert pod["serviceAccountName"] == "gputide-scheduler"   # its rights: test_deploy_rbac.py
    _restricted(container, pod["securityContext"])
    netpol = one("overlays/scheduler", "NetworkPolicy", "gputide-scheduler")
    assert netpol["spec"]["podSelector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]
    assert [p["port"] for r in netpol["spec"]["ingress"] for p in r["ports"]] == [9837]   # in: metrics only
    # out: DNS, the API server, and Prometheus on the port of the URL it is given
    assert {p["port"] for r in netpol["spec"]["egress"] for p in r["ports"]} == {53, 443, 6443, 8443, 9090}
    controller = one("base", "Deployment", "gputide-controller")["spec"]["template"]["spec"]["containers"][0]
    assert f"--prometheus={parsed.prometheus}" in controller["args"]     # the controller's Prometheus
    assert parsed.prometheus.rsplit(":", 1)[1] == "9090"
    assert parsed.metrics_port == 9837 and {"name": "metrics", "containerPort": 9837, "protocol": "TCP"} in container[
        "ports"]
    for probe, path in (("livenessProbe", "/healthz"), ("readinessProbe", "/readyz")):
        assert container[probe]["httpGet"] == {"path": path, "port": "metrics"}
    monitor = one("overlays/scheduler", "PodMonitor", "gputide-scheduler")
    assert monitor["spec"]["selector"]["matchLabels"] == deploy["spec"]["selector"]["matchLabels"]


def test_network_policies_and_pdb_select_the_pods_they_protect():
    pods = {d["metadata"]["name"]: d["spec"]["template"]["metadata"]["labels"]
            for d in objects("base", "Deployment") + objects("base", "DaemonSet")}
    for np in objects("base", "NetworkPolicy"):
        assert np["spec"]["podSelector"]["matchLabels"].items() <= pods[np["metadata"]["name"]].items()
        assert set(np["spec"]["policyTypes"]) == {"Ingress", "Egress"}
    pdb = one("base", "PodDisruptionBudget", "gputide-controller")
    assert pdb["spec"]["selector"]["matchLabels"].items() <= pods["gputide-controller"].items()


@pytest.mark.parametrize("overlay", OVERLAYS)
def test_every_replicated_deployment_keeps_one_replica_through_a_drain(overlay):
    """A node drain evicts through the Eviction API, which only a PodDisruptionBudget slows: without one both
    replicas of a leader-elected pair may go at once (the scheduler's did: no pod with `schedulerName: gputide` was
    bound until one came back)."""
    budgets = objects(overlay, "PodDisruptionBudget")
    for deploy in objects(overlay, "Deployment"):
        if deploy["spec"].get("replicas", 1) < 2:
            continue
        labels = deploy["spec"]["template"]["metadata"]["labels"]
        covering = [b for b in budgets if b["metadata"]["namespace"] == deploy["metadata"]["namespace"]
                    and b["spec"]["selector"]["matchLabels"].items() <= labels.items()]
        assert [b["spec"].get("minAvailable") for b in covering] == [1], deploy["metadata"]["name"]


def test_dockerfile_builds_a_non_root_image_with_gputide_as_entrypoint():
    text = (ROOT / "deploy" / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in text.splitlines() if line and not line.startswith("#")
                    and not line.startswith((" ", "\t"))]
    by_kind = {}
    for kind, *rest in instructions:
        by_kind.setdefault(kind, []).append(rest[0] if rest else "")
    assert [f.split("@")[0] for f in by_kind["FROM"]] == ["python:3.11-slim-bookworm"]   # test_deploy_image.py
    assert any("pip install" in r and " ." in r for r in by_kind["RUN"])
    user = by_kind["USER"][-1].split(":")[0]
    assert user not in ("root", "0")
    assert json.loads(by_kind["ENTRYPOINT"][-1]) == ["gputide"]
    # what the code reads from outside the package at run time is in the image, where the ENV says
    for env, source in (("GPUTIDE_DASHBOARDS_DIR", "dashboards/*.json"), ("GPUTIDE_RULES_DIR", "rules/*.yaml")):
        where = re.search(rf"{env}=(\S+)", text).group(1)
        assert f"COPY {source} {where}/" in text
        assert f"!{source}" in (ROOT / "deploy" / "Dockerfile.dockerignore").read_text()
    ports = {int(p) for p in by_kind["EXPOSE"][-1].split()}
    assert {9835, 9836, 9837} <= ports   # exporter, controller, scheduler / power-cap agent


def test_capacity_overlay_mounts_valid_profiles_and_builds_the_capacity_planner(tmp_path):
    """The rendered policy and services ConfigMaps, written where the pod mounts them, drive the real controller."""
    from balancer.cli import build_parser
    from balancer.cmd.run import build_reconciler
    from balancer.metrics import ControllerMetrics

    files = {"policy": ("gputide-policy", "policy.yaml"), "services": ("gputide-services", "services.yaml")}
    paths = {}
    for key, (name, item) in files.items():
        paths[key] = tmp_path / item
        paths[key].write_text(one("overlays/capacity", "ConfigMap", name)["data"][item])
    deployment = one("overlays/capacity", "Deployment", "gputide-controller")["spec"]["template"]["spec"]
    container = deployment["containers"][0]
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    volumes = {v["name"]: v.get("configMap", {}).get("name") for v in deployment["volumes"]}
    assert volumes["services"] == "gputide-services"
    args = [a.replace("$(POD_NAMESPACE)", "gputide").replace("/etc/gputide/policy.yaml", str(paths["policy"]))
            .replace(f"{mounts['services']}/services.yaml", str(paths["services"])) for a in container["args"]]
    assert f"--services={paths['services']}" in args
    args = [a for a in args if a != "--leader-elect"]  # no API server here: plan without the Lease
    reconciler = build_reconciler(build_parser().parse_args([*args, "--dry-run"]), ControllerMetrics())
    assert reconciler.policy.capacity.enabled and list(reconciler.planner.profiles) == ["llm-chat"]


API_SERVER_PORTS = {443, 6443, 8443}   # after the kubernetes Service's DNAT: managed clouds, kubeadm/kind/k3s, minikube


@pytest.mark.parametrize("overlay,name", [("base", "gputide-controller"), ("overlays/scheduler", "gputide-scheduler"),
                                          ("overlays/power-cap", "gputide-exporter")])
def test_every_pod_that_talks_to_the_api_server_may_reach_it_on_each_of_its_usual_ports(
        overlay: str, name: str) -> None:
    """A NetworkPolicy matches egress on the API server's own port (after DNAT), which differs between clusters: a
    policy that allowed 443 and 6443 only cut the controller off from minikube's API server (8443)."""
    policy = one(overlay, "NetworkPolicy", name)["spec"]
    allowed = {p["port"] for rule in policy["egress"] for p in rule["ports"] if p.get("protocol", "TCP") == "TCP"}
    assert allowed >= API_SERVER_PORTS
