"""Fleet-wide figures on the dashboards count each GPU once, however many exporters publish it.

One GPU can come in two per-GPU series at once (rules/gputide-recording.yaml): a dcgm-exporter pod being replaced,
dcgm-exporter beside gputide's exporter, or one that names its own pod as Hostname keeps two `hostname` copies
of it. Here GPU-a is published twice (Hostname n0 and dcgm-exporter-x7k2p) and GPU-b once: two GPUs, 1000 W,
SM activity 0.8 and 0.2, GPU-a thermally throttled with fatal XID 79. The committed dashboards' queries, evaluated
by promtool on the shipped recording rules, must say so (counting copies, they read 3 GPUs, 1700 W, 1 + 0.8 + 0.2
SM-busy GPUs and two throttled GPUs with two fatal XIDs).
"""

from __future__ import annotations

import pytest
from panel_eval import ROOT, check, check_exprs, panel_query

RULES = ROOT / "rules" / "gputide-recording.yaml"
# (UUID, Hostname copies, watts, SM activity, clock event reasons, XID)
GPUS = [("GPU-a", ("n0", "dcgm-exporter-x7k2p"), 700, 0.8, 0x40, 79), ("GPU-b", ("n1",), 300, 0.2, 0, 0)]
# (dashboard file, panel title, legend of the target) -> the value when each GPU counts once
TRUTH = {
    ("gpu-fleet.json", "GPUs reporting", "GPUs"): 2,
    ("gpu-fleet.json", "Fleet power draw", "power"): 1000,
    ("gpu-fleet.json", "Mean SM activity", "SM active"): 0.5,
    ("gpu-fleet.json", "Throttle reasons", "thermal slowdown"): 1,
    ("gpu-fleet.json", "GPUs with an XID error", "any XID"): 1,
    ("gpu-fleet.json", "GPUs with an XID error", "fatal XID"): 1,
    ("fragmentation-utilisation.json", "Used share", "used"): 0.5,
    ("fragmentation-utilisation.json", "Allocated vs used vs idle GPUs", "used (SM-busy equivalents)"): 1,
}


def _input_series() -> list[dict]:
    out = []
    for uuid, hosts, watts, sm, reasons, xid in GPUS:
        for host in hosts:
            labels = f'cluster="c",Hostname="{host}",gpu="0",UUID="{uuid}",modelName="NVIDIA H200"'
            for name, value in (("DCGM_FI_DEV_GPU_TEMP", 50), ("DCGM_FI_DEV_POWER_USAGE", watts),
                                ("DCGM_FI_PROF_SM_ACTIVE", sm), ("DCGM_FI_DEV_CLOCKS_EVENT_REASONS", reasons),
                                ("DCGM_FI_DEV_XID_ERRORS", xid)):
                out.append({"series": f"{name}{{{labels}}}", "values": f"{value}x20"})
    return out


@pytest.mark.integration
def test_fleet_figures_count_a_gpu_published_twice_once(promtool, tmp_path):
    check(promtool, tmp_path, _input_series(), TRUTH, rules=RULES, interval="15s", eval_time="4m")


# the per-GPU top-N panels: one row or line per GPU, not one per copy (legend of the target)
TOP_N = [("gpu-fleet.json", "Temperature above pool mean", "{{hostname}}/{{gpu}}"),
         ("gpu-fleet.json", "Last XID per GPU", "__auto"),
         ("gpu-fleet.json", "Closest to slowdown", "{{hostname}}/{{gpu}}")]


@pytest.mark.integration
@pytest.mark.parametrize("panel", TOP_N, ids=[t for _, t, _ in TOP_N])
def test_top_n_panels_list_a_gpu_published_twice_once(promtool, tmp_path, panel):
    """GPU-a, published under two hostnames, took two of the top five above the pool mean and two rows of the XID
    table (pushing a real GPU out of a full list)."""
    expr = panel_query(*panel)
    series = _input_series() + [
        {"series": f'DCGM_FI_DEV_SLOWDOWN_TEMP{{cluster="c",Hostname="{h}",gpu="0",UUID="{u}",'
                   'modelName="NVIDIA H200"}',
         "values": "89x20"} for u, hosts, *_ in GPUS for h in hosts]
    check_exprs(promtool, tmp_path, series, {f"count by (UUID) ({expr})": {"GPU-a": 1, "GPU-b": 1}}, rules=RULES,
                interval="15s", eval_time="4m")
