"""A stacked panel's top reads as a total, so a panel stacks only series that split a whole: no GPU in two of them.

Evaluated by promtool on the committed queries: each panel's targets summed (the height of its stack) must be the
whole they split, where the panel stacks.
"""

from __future__ import annotations

import pytest
from panel_eval import ROOT, panel, panel_query, run

RULES = ROOT / "rules" / "gputide-recording.yaml"


def _stacked(found: dict) -> bool:
    return found["fieldConfig"]["defaults"].get("custom", {}).get("stacking", {}).get("mode", "none") != "none"


def _stack_height(file: str, title: str) -> str:
    """The height of `title`'s stack: its targets' values summed."""
    return " + ".join(f"sum({panel_query(file, title, t['legendFormat'])})" for t in panel(file, title)["targets"])


@pytest.mark.integration
def test_gpus_by_class_stack_to_the_fleet_the_controller_plans(promtool, tmp_path):
    """The controller counts the GPUs loaned to training within training (balancer.plan.capacity_pools:
    loaned <= training): 4 inference, 6 training of which 2 loaned, 2 idle are 12 GPUs, and the stack read 14. A
    standby reports every class 0."""
    split = {"inference": 4, "training": 6, "loaned": 2, "idle": 2}
    series = [{"series": f'gputide_capacity_gpus{{cluster="c", instance="ctl-{i}", class="{cls}"}}',
               "values": f"{n if i == 0 else 0}x20"} for i in (0, 1) for cls, n in split.items()]
    title = "GPUs by class"
    assert _stacked(panel("tidal-capacity.json", title))
    run(promtool, tmp_path, series, [{"expr": _stack_height("tidal-capacity.json", title), "eval_time": "4m",
                                      "exp_samples": [{"value": 12}]}], interval="15s")


@pytest.mark.integration
def test_a_gpu_held_down_for_heat_and_power_is_one_gpu(promtool, tmp_path):
    """One GPU thermally throttled and power capped at once (clock event reasons 0x40 | 0x4): both lines read 1, and
    stacked they read two GPUs held down."""
    labels = 'cluster="c",Hostname="n0",gpu="0",UUID="GPU-a",modelName="NVIDIA H200"'
    series = [{"series": f"DCGM_FI_DEV_GPU_TEMP{{{labels}}}", "values": "80x20"},
              {"series": f"DCGM_FI_DEV_CLOCKS_EVENT_REASONS{{{labels}}}", "values": f"{0x44}x20"}]
    title = "Throttle reasons"
    tests = [{"expr": panel_query("gpu-fleet.json", title, legend), "eval_time": "4m", "exp_samples": [{"value": 1}]}
             for legend in ("thermal slowdown", "power capped")]
    run(promtool, tmp_path, series, tests, rules=RULES, interval="15s")
    assert not _stacked(panel("gpu-fleet.json", title)), "one GPU held down for two reasons stacks as two GPUs"


SHARED = [("usage-chargeback.json", "GPUs held per namespace"),
          ("fragmentation-utilisation.json", "GPUs by workload class")]


@pytest.mark.integration
@pytest.mark.parametrize(("file", "title"), SHARED, ids=[t for _, t in SHARED])
def test_a_gpu_two_namespaces_and_classes_share_is_one_gpu(promtool, tmp_path, file, title):
    """One GPU time-sliced between an inference pod of ns-a and a training pod of ns-b: the per-namespace and
    per-class counts hold it in each (rules/gputide-recording.yaml), so a stack of them read two GPUs."""
    found = panel(file, title)
    if not _stacked(found):
        return
    gpu = 'cluster="c",Hostname="n0",gpu="0",UUID="GPU-a",modelName="NVIDIA H200"'
    series = [{"series": f"DCGM_FI_DEV_GPU_TEMP{{{gpu}}}", "values": "60x20"}] + [
        {"series": f'gputide_gpu_workload_info{{cluster="c",UUID="GPU-a",namespace="{ns}",pod="{pod}",'
                   f'workload_class="{cls}"}}', "values": "1x20"}
        for ns, pod, cls in (("ns-a", "p-a", "inference"), ("ns-b", "p-b", "training"))]
    run(promtool, tmp_path, series, [{"expr": _stack_height(file, title), "eval_time": "4m",
                                      "exp_samples": [{"value": 1}]}], rules=RULES, interval="15s")
