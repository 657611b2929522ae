"""`gputide simulate` never writes 0 for what a run did not measure: policy `none` runs no reconcile cycle, so its
reconcile times are null ("not measured" in the table), not 0 ms (an instant controller); a fleet serving no
service has no latency in the timeseries (an empty cell), not a worst p99 of 0; the services' own latency under
`none` is the one they had."""

from __future__ import annotations

import csv
import json
import math

from balancer.app import scenarios
from balancer.cli import main
from balancer.sim import SimCluster

DAYS = 0.05   # 72 one-minute steps


def rows(path):
    with open(path) as fh:
        return list(csv.DictReader(fh))


def test_policy_none_reports_its_reconcile_times_as_not_measured_in_the_json_and_the_table(tmp_path, capsys):
    out = tmp_path / "none"
    assert main(["--log-level", "WARNING", "simulate", "--scenario", "hotspot", "--policy", "none", "--days",
                 str(DAYS), "--no-plots", "--out", str(out)]) == 0
    table = dict(line.split(None, 1) for line in capsys.readouterr().out.splitlines())
    controller = json.loads((out / "summary.json").read_text())["controller"]
    assert controller == {"reconcile_p50_ms": None, "reconcile_p99_ms": None, "cycles": 0}
    assert table["controller.reconcile_p50_ms"] == table["controller.reconcile_p99_ms"] == "not measured"
    assert table["controller.cycles"] == "0"
    # the services' latency is the one the simulator gave them, as with any policy: never 0
    sim, _, _ = scenarios.build("hotspot", seed=0)
    first = rows(out / "timeseries.csv")[0]
    sim.step(60.0)
    expected = max(s.p99_latency_s / s.slo_latency_s for s in sim.service_status().values())
    assert float(first["p99_over_slo_max"]) == expected > 0


def test_a_policy_that_reconciles_still_reports_its_times(tmp_path):
    sim, events, _ = scenarios.build("hotspot", seed=0)
    summary = scenarios.run_simulation(sim, "gputide", DAYS, 60.0, tmp_path, events=events, scenario="hotspot",
                                       plots=False)
    controller = summary["controller"]
    assert controller["cycles"] > 0 and 0 < controller["reconcile_p50_ms"] <= controller["reconcile_p99_ms"]


def test_a_fleet_serving_no_service_has_no_latency_in_the_timeseries_not_zero(tmp_path):
    sim = SimCluster(scenarios.hotspot_fleet(), seed=0, step_s=60.0)   # no inference service at all
    scenarios.run_simulation(sim, "none", DAYS, 60.0, tmp_path, plots=False)
    cells = {r["p99_over_slo_max"] for r in rows(tmp_path / "timeseries.csv")}
    assert len(cells) == 1 and math.isnan(float(cells.pop()))
