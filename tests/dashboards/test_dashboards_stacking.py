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
