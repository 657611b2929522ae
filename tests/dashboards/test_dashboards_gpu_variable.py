"""The GPU Fleet dashboard narrows its per-GPU panels to the GPUs `$gpu` selects, and the lint enforces it.

`$gpu` is a multi-select of dcgm-exporter's `gpu` label (the GPU index on its node), listed from the normalised
series of the GPUs `$cluster`, `$node` and `$model` select, so picking a node lists its own GPUs. Here two nodes
of two GPUs each: `$gpu` = 1 keeps GPU 1 of each node; with `$node` = node-a too, one GPU.
"""

from __future__ import annotations

import copy
import json

import pytest
from panel_eval import ROOT, panel_query, run

from dashboards.lint import lint, panels

FLEET = "gpu-fleet.json"


def committed(file: str) -> dict:
    return json.loads((ROOT / "dashboards" / file).read_text())


def variable(dashboard: dict, name: str) -> dict:
    (found,) = [v for v in dashboard["templating"]["list"] if v["name"] == name]
    return found


def test_the_gpu_variable_is_a_multi_select_of_the_selected_nodes_gpu_indexes_after_node_and_model():
    d = committed(FLEET)
    gpu = variable(d, "gpu")
    assert gpu["query"]["query"] == ('label_values(gpu:temperature:celsius{cluster=~"$cluster", hostname=~"$node", '
                                     'modelName=~"$model"}, gpu)')
    assert gpu["multi"] and gpu["includeAll"] and gpu["allValue"] == ".*"
    assert [v["name"] for v in d["templating"]["list"]] == ["datasource", "cluster", "node", "model", "gpu"]


def test_every_per_gpu_panel_of_the_fleet_dashboard_filters_on_gpu():
    per_gpu = [p for p in panels(committed(FLEET))
               if any(t.get("legendFormat", "").startswith("{{hostname}}/{{gpu}}") for t in p.get("targets", []))
               or p["title"] in {"Node x GPU thermal headroom grid", "Last XID per GPU"}]
    assert len(per_gpu) >= 8
    for p in per_gpu:
        for t in p["targets"]:
            assert 'gpu=~"$gpu"' in t["expr"], (p["title"], t["expr"])


def _gpus() -> list[dict]:
    out = []
    for node in ("node-a", "node-b"):
        for gpu in ("0", "1"):
            labels = (f'cluster="c1", hostname="{node}", gpu="{gpu}", UUID="GPU-{node}-{gpu}", '
                      'modelName="NVIDIA H100 80GB HBM3"')
            out += [{"series": f"gpu:temperature:celsius{{{labels}}}", "values": "60x10"},
                    {"series": f"gpu:temperature_headroom:celsius{{{labels}}}", "values": f"{20 + int(gpu)}x10"}]
    return out


@pytest.mark.integration
@pytest.mark.parametrize(("variables", "gpus"), [
    ({}, 4),
    ({"gpu": "1"}, 2),
    ({"gpu": "0|1"}, 4),
    ({"gpu": "1", "node": "node-a"}, 1),
], ids=["All GPUs: every GPU", "GPU 1: GPU 1 of each node", "GPUs 0 and 1 (multi-select): both",
        "GPU 1 of node-a: one GPU"])
def test_per_gpu_panels_show_the_gpus_selected(promtool, tmp_path, variables, gpus):
    exprs = [f"count({panel_query(FLEET, title, '{{hostname}}/{{gpu}}', variables)})"
             for title in ("GPU temperature", "Closest to slowdown")]
    exprs.append(panel_query(FLEET, "GPUs reporting", "GPUs", variables))   # the stats count the selection too
    tests = [{"expr": expr, "eval_time": "5m", "exp_samples": [{"value": gpus}]} for expr in exprs]
    run(promtool, tmp_path, _gpus(), tests)


def _drop_gpu_variable(d):
    d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "gpu"]


def _unfiltered_heatmap(d):
    heatmap = next(p for p in panels(d) if p["type"] == "heatmap")
    heatmap["targets"][0]["expr"] = heatmap["targets"][0]["expr"].replace(', gpu=~"$gpu"', "")


def _unchained_gpu_variable(d):
    variable(d, "gpu")["query"]["query"] = "label_values(gpu:temperature:celsius, gpu)"


def _single_select_gpu_variable(d):
    variable(d, "gpu")["multi"] = False


@pytest.mark.parametrize(("rule", "breakage"), [
    ("template-gpu-variable", _drop_gpu_variable),
    ("target-label-filters", _unfiltered_heatmap),
    ("template-gpu-variable", _unchained_gpu_variable),
    ("template-variables", _single_select_gpu_variable),
], ids=["per-GPU panels without a gpu variable are flagged", "a per-GPU selector without $gpu is flagged",
        "a gpu variable that ignores the node selected is flagged", "a single-select gpu variable is flagged"])
def test_the_lint_catches_a_dashboard_that_cannot_pick_a_gpu(rule, breakage):
    d = copy.deepcopy(committed(FLEET))
    assert lint(d) == {}
    breakage(d)
    assert rule in lint(d)
