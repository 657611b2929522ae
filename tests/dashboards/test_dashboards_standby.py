"""The controller dashboard shows the acting replica's eviction budget and telemetry staleness, not a standby's.

A replica that lost its Lease stops reconciling, and its gputide_eviction_budget_remaining and
gputide_telemetry_staleness_seconds stay at what they read when it last acted (the alerts skip it:
`unless on (cluster, job, instance) (gputide_leader == 0)`). Here the leader has 40 evictions left and 20 s old
telemetry; the standby, demoted with an empty budget during a telemetry outage, still reads 0 and 900 s. A
controller without leader election has no gputide_leader and is shown.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from balancer.dashboards_render import interpolate

ROOT = Path(__file__).resolve().parents[2]
# (panel title, target legend) -> the leader's value
TRUTH = {("Eviction budget left", "budget"): 40, ("Telemetry staleness", "staleness"): 20,
         ("Fail-static and staleness", "staleness"): 20}


def panel_query(title: str, legend: str) -> str:
    dashboard = json.loads((ROOT / "dashboards" / "balancer.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p.get("title") == title]
    (target,) = [t for t in panel["targets"] if t.get("legendFormat") == legend]
    return interpolate(target["expr"], {"cluster": ".*"}, step=60, range_s=3600)


def _series(replicas: dict[str, tuple[int | None, int, int]]) -> list[dict]:
    out = []
    for instance, (leader, budget, staleness) in replicas.items():
        labels = f'cluster="c1", job="gputide-controller", instance="{instance}"'
        if leader is not None:
            out.append({"series": f'gputide_leader{{{labels}, lease="gputide-controller"}}', "values": f"{leader}x10"})
        out.append({"series": f"gputide_eviction_budget_remaining{{{labels}}}", "values": f"{budget}x10"})
        out.append({"series": f"gputide_telemetry_staleness_seconds{{{labels}}}", "values": f"{staleness}x10"})
    return out


@pytest.mark.parametrize("replicas", [
    {"ctl-0:9836": (1, 40, 20), "ctl-1:9836": (0, 0, 900)},
    {"ctl-0:9836": (None, 40, 20)},
], ids=["leader and demoted standby", "no leader election"])
@pytest.mark.integration
def test_a_standbys_frozen_budget_and_staleness_are_not_shown(promtool, tmp_path, replicas):
    rules = tmp_path / "none.yaml"
    rules.write_text("groups: []\n")
    test = {"rule_files": [str(rules)], "evaluation_interval": "1m", "tests": [{
        "interval": "1m", "input_series": _series(replicas),
        "promql_expr_test": [{"expr": panel_query(*key), "eval_time": "5m", "exp_samples": [{"value": value}]}
                             for key, value in TRUTH.items()]}]}
    path = tmp_path / "standby_test.yaml"
    path.write_text(yaml.safe_dump(test, sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
