"""The utilisation dashboard's counts and shares are of the GPUs `$node` and `$model` select, not of the cluster.

Cluster c: node n0 holds GPU-0 (a training pod, SM activity 0.2) and GPU-1 (idle); n1 holds GPU-2 and GPU-3 (both
allocated, SM activity 0.9); n2 holds GPU-4 (idle, an L4 where the others are H200s). The panels read the cluster's
rules alone (4 allocated of 5), so with one node picked they set that node's SM activity against the whole cluster's
allocation: n0 read 60 % allocated beside 10 % used.
"""

from __future__ import annotations

import json

import pytest
from panel_eval import ROOT, panel_query, run

RULES = ROOT / "rules" / "gputide-recording.yaml"
BOARD = "fragmentation-utilisation.json"
COUNTS = "Allocated vs used vs idle GPUs"
# (UUID, node, model, SM activity, pod holding it)
GPUS = [("GPU-0", "n0", "NVIDIA H200", 0.2, "train-0"), ("GPU-1", "n0", "NVIDIA H200", 0.0, ""),
        ("GPU-2", "n1", "NVIDIA H200", 0.9, "train-1"), ("GPU-3", "n1", "NVIDIA H200", 0.9, "train-1"),
        ("GPU-4", "n2", "NVIDIA L4", 0.0, "")]


def _series() -> list[dict]:
    out = []
    for i, (uuid, node, model, sm, pod) in enumerate(GPUS):
        labels = f'cluster="c",Hostname="{node}",gpu="{i % 2}",UUID="{uuid}",modelName="{model}"'
        out += [{"series": f"DCGM_FI_DEV_GPU_TEMP{{{labels}}}", "values": "50x20"},
                {"series": f"DCGM_FI_PROF_SM_ACTIVE{{{labels}}}", "values": f"{sm}x20"}]
        if pod:
            out.append({"series": f'gputide_gpu_workload_info{{cluster="c",UUID="{uuid}",namespace="ml",pod="{pod}",'
                                  f'workload_class="training"}}', "values": "1x20"})
    return out


@pytest.mark.integration
@pytest.mark.parametrize(("variables", "total", "allocated", "idle", "used"), [
    ({"node": "n0"}, 2, 1, 1, 0.2),
    ({"node": "n1"}, 2, 2, 0, 1.8),
    ({"node": "n2"}, 1, 0, 1, 0),
    ({"model": "NVIDIA H200"}, 4, 3, 1, 2),
    ({}, 5, 3, 2, 2),
], ids=["node n0", "node n1", "node n2: none allocated reads 0", "the H200s", "all"])
def test_counts_and_shares_are_of_the_selected_gpus(promtool, tmp_path, variables, total, allocated, idle, used):
    def reads(title: str, legend: str, value: float) -> dict:
        return {"expr": f"round({panel_query(BOARD, title, legend, variables)}, 0.001)", "eval_time": "4m",
                "exp_samples": [{"value": value}]}

    run(promtool, tmp_path, _series(), [
        reads(COUNTS, "total", total), reads(COUNTS, "allocated", allocated), reads(COUNTS, "idle", idle),
        reads(COUNTS, "used (SM-busy equivalents)", used),
        reads("Allocated share", "allocated", round(allocated / total, 3)),
        reads("Used share", "used", round(used / total, 3)),
    ], rules=RULES, interval="15s")


# (selection, {class: GPUs}, {model: (mean, stddev) of SM activity})
BY_NODE = [
    ({"node": "n0"}, {"training": 1, "idle": 1}, {"NVIDIA H200": (0.1, 0.1)}),
    ({"node": "n1"}, {"training": 2, "idle": 0}, {"NVIDIA H200": (0.9, 0)}),
    ({"node": "n2"}, {"idle": 1}, {"NVIDIA L4": (0, 0)}),
    ({}, {"training": 3, "idle": 2}, {"NVIDIA H200": (0.5, 0.4062), "NVIDIA L4": (0, 0)}),
]


@pytest.mark.integration
@pytest.mark.parametrize(("variables", "classes", "models"), BY_NODE, ids=["node n0", "node n1", "node n2", "all"])
def test_classes_and_per_model_activity_are_of_the_selected_nodes(promtool, tmp_path, variables, classes, models):
    """GPUs by workload class and SM activity by model read the cluster's rules (class:gpu_count:sum,
    model:gpu_sm_active:ratio_avg / _stddev), so with node n0 picked they drew the cluster's 3 training GPUs and an
    H200 mean of 0.5 beside n0's counts (1 allocated of 2, 0.2 used). They are now of the selected GPUs; the panels
    that read the controller's per-model gauges cannot be, and say so."""
    def series(title: str, legend: str, label: str, values: dict[str, float]) -> dict:
        return {"expr": f"round({panel_query(BOARD, title, legend, variables)}, 0.0001)", "eval_time": "4m",
                "exp_samples": [{"labels": f'{{{label}="{k}"}}' if label == "workload_class" else
                                 f'{{cluster="c", {label}="{k}"}}', "value": v} for k, v in sorted(values.items())]}

    run(promtool, tmp_path, _series(), [
        series("GPUs by workload class", "{{workload_class}}", "workload_class", classes),
        series("SM activity by model (mean and spread)", "{{modelName}} mean", "modelName",
               {m: v[0] for m, v in models.items()}),
        series("SM activity by model (mean and spread)", "{{modelName}} stddev", "modelName",
               {m: v[1] for m, v in models.items()}),
    ], rules=RULES, interval="15s")


def test_every_panel_the_node_does_not_narrow_says_so():
    """Beside the node-filtered panels, a panel that cannot narrow to the selected node (the controller's per-model
    gauges) says `$node does not narrow it`; every other panel's queries filter on $node."""
    for p in json.loads((ROOT / "dashboards" / BOARD).read_text())["panels"]:
        if not all("$node" in t["expr"] for t in p["targets"]):
            assert "$node does not narrow it" in p["description"], p["title"]
            assert all("gputide_" in t["expr"] for t in p["targets"]), p["title"]
