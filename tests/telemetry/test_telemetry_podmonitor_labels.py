"""The exporter's PodMonitor keeps the join table's pods: scraped by the Prometheus Operator, target labels
`namespace`/`pod` (the exporter pod's) push the series' own to `exported_*`, and the PodMonitor's metric relabelings
(read from deploy/base/monitoring.yaml, not copied) must put them back. Likewise `Hostname`: the PodMonitor sets it
from the pod's node, and the exporter's own (the same node name, `--hostname=$(NODE_NAME)`) must not survive as
`exported_Hostname` on every GPU series. Checked on a real Prometheus, with the Operator's target labels as
static labels."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from balancer.telemetry.promserver import default_rule_files

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
BODY = """# TYPE gputide_gpu_workload_info gauge
gputide_gpu_workload_info{UUID="GPU-0",namespace="ml",pod="train-0",workload_class="unknown"} 1
gputide_gpu_workload_info{UUID="GPU-1",namespace="web",pod="chat-7c9d-x2",workload_class="unknown"} 1
# TYPE DCGM_FI_DEV_GPU_TEMP gauge
DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-0",modelName="NVIDIA H200",Hostname="gpu-node-1"} 41
"""


def metric_relabelings() -> list[dict]:
    """The exporter PodMonitor's metricRelabelings as Prometheus's metric_relabel_configs."""
    docs = yaml.safe_load_all((ROOT / "deploy/base/monitoring.yaml").read_text())
    (monitor,) = [d for d in docs if d and d["kind"] == "PodMonitor" and d["metadata"]["name"] == "gputide-exporter"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    snake = re.compile(r"(?<!^)(?=[A-Z])")
    return [{snake.sub("_", k).lower(): v for k, v in r.items()} for r in endpoint["metricRelabelings"]]


def test_the_join_tables_pods_survive_the_operators_target_labels(prometheus_factory, metrics_server):
    exporter = metrics_server(BODY)
    operator_labels = {"namespace": "gputide", "pod": "gputide-exporter-x7k2p", "container": "exporter",
                       "Hostname": "gpu-node-1"}   # the PodMonitor's relabeling of __meta_kubernetes_pod_node_name
    prom = prometheus_factory([], rule_files=default_rule_files(), extra_config={"scrape_configs": [{
        "job_name": "gputide/gputide-exporter",
        "static_configs": [{"targets": [exporter.address], "labels": {"cluster": "c1", **operator_labels}}],
        "metric_relabel_configs": metric_relabelings()}]})
    rows = prom.wait_for("gputide_gpu_workload_info", lambda r: len(r) == 2, timeout=30)
    got = sorted((r["metric"]["UUID"], r["metric"]["namespace"], r["metric"]["pod"]) for r in rows)
    assert got == [("GPU-0", "ml", "train-0"), ("GPU-1", "web", "chat-7c9d-x2")]
    assert not any(k.startswith("exported_") for r in rows for k in r["metric"])
    shares = prom.wait_for("gpu_pod:attribution:share", lambda r: len(r) == 2, timeout=30)
    assert {r["metric"]["namespace"] for r in shares} == {"ml", "web"}   # chargeback bills the workloads
    (temp,) = prom.wait_for("DCGM_FI_DEV_GPU_TEMP", bool, timeout=30)
    assert temp["metric"]["Hostname"] == "gpu-node-1"
    assert not [k for k in temp["metric"] if k.startswith("exported_")]
