"""The fleet dashboard colours heat by each GPU's own slowdown temperature, not by one fixed temperature.

Slowdown is 87 °C on an H100 and 93 °C on an L4 (balancer.catalog). Here an H100 at 85 °C (2 °C from slowdown: a hot
reading for the controller, whose default hotspots.marginC is 5 °C) and an L4 at 86 °C (7 °C from it: not hot). The
panels that say where it is hot now must colour the H100 red and the L4 not red; with a fixed 85 °C red threshold the
L4 read hotter than the H100. The H100 is published by two exporters (two hostnames): the ten GPUs closest to
slowdown list it once.
"""

from __future__ import annotations

import json

import pytest
from panel_eval import ROOT, colour, panel, panel_query, run

RULES = ROOT / "rules" / "gputide-recording.yaml"
BOARD = "gpu-fleet.json"
# (UUID, hostnames, model, temperature, slowdown temperature)
GPUS = [("GPU-h", ("n0", "dcgm-exporter-x7k2p"), "NVIDIA H100 80GB HBM3", 85, 87),
        ("GPU-l", ("n1",), "NVIDIA L4", 86, 93)]
HEADROOM = {"GPU-h": 2, "GPU-l": 7}


def _series() -> list[dict]:
    out = []
    for uuid, hosts, model, temp, slowdown in GPUS:
        for host in hosts:
            labels = f'cluster="c",Hostname="{host}",gpu="0",UUID="{uuid}",modelName="{model}"'
            out += [{"series": f"DCGM_FI_DEV_GPU_TEMP{{{labels}}}", "values": f"{temp}x20"},
                    {"series": f"DCGM_FI_DEV_SLOWDOWN_TEMP{{{labels}}}", "values": f"{slowdown}x20"}]
    return out


@pytest.mark.integration
def test_hot_now_panels_read_headroom_below_each_gpus_own_slowdown(promtool, tmp_path):
    stat = panel_query(BOARD, "Least thermal headroom", "headroom")
    closest = panel_query(BOARD, "Closest to slowdown", "{{hostname}}/{{gpu}}")
    run(promtool, tmp_path, _series(), [
        {"expr": stat, "eval_time": "4m", "exp_samples": [{"value": HEADROOM["GPU-h"]}]},
        # one bar per GPU, the H100 once though two exporters publish it
        {"expr": f"count by (UUID) ({closest})", "eval_time": "4m",
         "exp_samples": [{"labels": f'{{UUID="{u}"}}', "value": 1} for u in sorted(HEADROOM)]},
        {"expr": f"max by (UUID) ({closest})", "eval_time": "4m",
         "exp_samples": [{"labels": f'{{UUID="{u}"}}', "value": v} for u, v in sorted(HEADROOM.items())]},
    ], rules=RULES, interval="15s")


@pytest.mark.parametrize("title", ["Least thermal headroom", "Node x GPU thermal headroom grid", "Closest to slowdown"])
def test_the_gpu_two_degrees_from_slowdown_is_red_and_the_one_seven_degrees_from_it_is_not(title):
    hot_now = panel(BOARD, title)
    assert colour(hot_now, HEADROOM["GPU-h"]) == "red"
    assert colour(hot_now, HEADROOM["GPU-l"]) != "red"
    assert any("temperature_headroom" in t["expr"] for t in hot_now["targets"])


def test_heatmap_colours_mean_one_value_whatever_the_fleets_range():
    """Grafana fits a heatmap's colour scale to the data by default: on a cool fleet (35-45 °C) the warmest GPU was
    drawn in the colour of heat, and on an idle one the busiest GPU at 3 % SM activity in the colour of busy."""
    from balancer.catalog import CATALOGUE

    colours = {p["title"]: p["options"]["color"]
               for p in json.loads((ROOT / "dashboards" / BOARD).read_text())["panels"]
               if p.get("type") == "heatmap"}
    temperature = colours.pop("GPU temperature")
    assert temperature.get("min", 100) <= 25
    assert temperature.get("max", 0) >= max(spec.slowdown_temp_c for spec in CATALOGUE.values())
    for title in ("SM activity", "SM activity per MIG instance"):
        ratio = colours.pop(title)
        assert (ratio.get("min"), ratio.get("max")) == (0, 1), title
    for title, scale in colours.items():   # power and memory: from nothing, up to the fleet's highest
        assert scale.get("min") == 0, title
