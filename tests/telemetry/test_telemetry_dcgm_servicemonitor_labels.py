"""The dcgm-exporter ServiceMonitor (deploy/overlays/with-dcgm-exporter) names each GPU's node by the exporter
pod's node, not by what dcgm-exporter wrote: without NODE_NAME in its environment dcgm-exporter puts its own pod
name in `Hostname`, so every GPU sat on a "node" named after an exporter pod and a rollout gave each GPU a second
Hostname. Its metric relabelings (read from the manifest, not copied) run on a real Prometheus, with the
Operator's target labels and the relabeled Hostname as static labels; the workload's `exported_pod` survives for
the attribution rules."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from balancer.telemetry.promserver import default_rule_files

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "deploy/overlays/with-dcgm-exporter/dcgm-exporter-servicemonitor.yaml"
BODY = ("# TYPE DCGM_FI_DEV_GPU_TEMP gauge\n"
        'DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",modelName="NVIDIA H200",Hostname="nvidia-dcgm-exporter-7xk2p",'
        'namespace="ml",pod="train-0",container="main"} 41\n')


def endpoint() -> dict:
    (monitor,) = [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d and d["kind"] == "ServiceMonitor"]
    (found,) = monitor["spec"]["endpoints"]
    return found


def snake(rules: list[dict]) -> list[dict]:
    under = re.compile(r"(?<!^)(?=[A-Z])")
    return [{under.sub("_", k).lower(): v for k, v in r.items()} for r in rules]


def test_hostname_comes_from_the_exporter_pods_node():
    (rule,) = endpoint()["relabelings"]
    assert (rule["sourceLabels"], rule["targetLabel"], rule.get("action", "replace")) == (
        ["__meta_kubernetes_pod_node_name"], "Hostname", "replace")


def test_dcgm_exporters_own_hostname_goes_and_the_workload_stays(prometheus_factory, metrics_server):
    exporter = metrics_server(BODY)
    operator_labels = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-7xk2p",
                       "container": "nvidia-dcgm-exporter", "Hostname": "gpu-node-1"}
    prom = prometheus_factory([], rule_files=default_rule_files(), extra_config={"scrape_configs": [{
        "job_name": "gpu-operator/gputide-dcgm-exporter",
        "static_configs": [{"targets": [exporter.address], "labels": {"cluster": "c1", **operator_labels}}],
        "metric_relabel_configs": snake(endpoint()["metricRelabelings"])}]})
    (temp,) = prom.wait_for("DCGM_FI_DEV_GPU_TEMP", bool, timeout=30)
    assert temp["metric"]["Hostname"] == "gpu-node-1"
    assert "exported_Hostname" not in temp["metric"]
    assert (temp["metric"]["exported_namespace"], temp["metric"]["exported_pod"]) == ("ml", "train-0")
    (share,) = prom.wait_for("gpu_pod:attribution:share", bool, timeout=30)
    assert (share["metric"]["namespace"], share["metric"]["pod"]) == ("ml", "train-0")
    (gpu,) = prom.wait_for("gpu:temperature:celsius", bool, timeout=30)
    assert gpu["metric"]["hostname"] == "gpu-node-1"
