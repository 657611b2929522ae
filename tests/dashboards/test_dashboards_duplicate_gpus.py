"""Fleet-wide figures on the dashboards count each GPU once, however many exporters publish it.

One GPU can come in two per-GPU series at once (rules/gputide-recording.yaml): a dcgm-exporter pod being replaced,
dcgm-exporter beside gputide's exporter, or one that names its own pod as Hostname keeps two `hostname` copies
of it. Here GPU-a is published twice (Hostname n0 and dcgm-exporter-x7k2p) and GPU-b once: two GPUs, 1000 W,
SM activity 0.8 and 0.2, GPU-a thermally throttled with fatal XID 79. The committed dashboards' queries, evaluated
by promtool on the shipped recording rules, must say so (counting copies, they read 3 GPUs, 1700 W, 1 + 0.8 + 0.2
SM-busy GPUs and two throttled GPUs with two fatal XIDs).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from balancer.dashboards_render import interpolate

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "gputide-recording.yaml"
VARIABLES = {"cluster": ".*", "node": ".*", "model": ".*"}
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


def panel_query(file: str, title: str, legend: str) -> str:
    dashboard = json.loads((ROOT / "dashboards" / file).read_text())
    (panel,) = [p for p in dashboard["panels"] if p.get("title") == title]
    (target,) = [t for t in panel["targets"] if t.get("legendFormat") == legend]
    return interpolate(target["expr"], VARIABLES, step=60, range_s=3600)


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
    test = {"rule_files": [str(RULES)], "evaluation_interval": "15s", "tests": [{
        "interval": "15s", "input_series": _input_series(),
        "promql_expr_test": [{"expr": panel_query(*key), "eval_time": "4m", "exp_samples": [{"value": value}]}
                             for key, value in TRUTH.items()]}]}
    path = tmp_path / "duplicate_gpus_test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
