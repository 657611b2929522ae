"""`gputide simulate` end to end, the hotspot claim, and `gputide run` input errors."""

from __future__ import annotations

import csv
import json

import pytest

from balancer.app import scenarios
from balancer.cli import main
from balancer.errors import EXIT_INPUT_ERROR

SUMMARY_KEYS = [
    "policy", "scenario", "days", "gpus", "inference.slo_attainment", "inference.gpu_hours", "training.gpu_hours",
    "training.progress", "training.preemptions", "training.max_wait_hours", "cluster.allocation_ratio",
    "cluster.sm_active_mean", "cluster.energy_kwh", "thermal.gpu_seconds_above_slowdown",
    "thermal.max_temperature_c", "actions.migrate", "actions.power_limit", "actions.rejected",
    "controller.reconcile_p50_ms", "controller.reconcile_p99_ms",
]


def get(d, dotted):
    for part in dotted.split("."):
        d = d[part]
    return d


@pytest.fixture(scope="module")
def hotspot_runs(tmp_path_factory):
    out = {}
    for policy in ("none", "gputide"):
        sim, events, _ = scenarios.build("hotspot", seed=0)
        out[policy] = scenarios.run_simulation(sim, policy, 1.0, 60.0, tmp_path_factory.mktemp(policy),
                                               events=events, scenario="hotspot", plots=False)
    return out


def test_gputide_cuts_time_above_slowdown_by_90_percent_without_hurting_slo_or_training(hotspot_runs):
    none, ours = hotspot_runs["none"], hotspot_runs["gputide"]
    base = none["thermal"]["gpu_seconds_above_slowdown"]
    assert base > 3600, "the scenario must really overheat a node"
    assert ours["thermal"]["gpu_seconds_above_slowdown"] <= 0.1 * base
    assert ours["inference"]["slo_attainment"] >= none["inference"]["slo_attainment"]
    assert abs(ours["training"]["progress"] / none["training"]["progress"] - 1) <= 0.02
    assert ours["actions"]["migrate"] > 0 and none["actions"]["migrate"] == 0


def test_simulate_cli_writes_every_artifact_with_every_summary_key(tmp_path, capsys):
    out = tmp_path / "run"
    rc = main(["--log-level", "WARNING", "simulate", "--scenario", "hotspot", "--policy", "gputide", "--days", "0.25",
               "--format", "json", "--out", str(out)])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    for key in SUMMARY_KEYS:
        get(summary, key)
    assert json.loads(capsys.readouterr().out) == summary
    with open(out / "timeseries.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert len(rows) == 0.25 * 24 * 60 and "temperature_max_c" in rows[0]
    assert (out / "timeseries.png").stat().st_size > 1000
    assert (out / "audit.jsonl").exists()


@pytest.mark.parametrize("argv", [
    ["simulate", "--scenario", "nope", "--policy", "gputide", "--out", "X"],
    ["simulate", "--scenario", "hotspot", "--policy", "magic", "--out", "X"],
    ["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "-1", "--out", "X"],
    ["simulate", "--scenario", "hotspot", "--policy", "none", "--cluster", "/nonexistent.yaml", "--out", "X"],
    ["run", "--prometheus", "http://127.0.0.1:1", "--interval", "soon", "--once", "--dry-run"],
    ["run", "--prometheus", "http://127.0.0.1:1", "--once", "--dry-run", "--policy", "/nonexistent.yaml"],
], ids=["unknown scenario", "unknown policy", "negative days", "missing fleet spec", "bad interval",
        "missing policy file"])
def test_bad_input_exits_2(argv, tmp_path, capsys):
    argv = [a if a != "X" else str(tmp_path / "o") for a in argv]
    assert main(argv) == EXIT_INPUT_ERROR
    assert "error" in capsys.readouterr().err


def test_run_once_against_an_unreachable_prometheus_holds_still(tmp_path, capsys):
    audit = tmp_path / "audit.jsonl"
    rc = main(["--log-level", "ERROR", "run", "--prometheus", "http://127.0.0.1:9", "--once", "--dry-run",
               "--metrics-port", "0", "--audit-log", str(audit)])
    assert rc == 3
    assert "fail_static" in capsys.readouterr().out
    assert json.loads(audit.read_text().splitlines()[0])["outcome"].startswith("fail_static:")


def test_sigterm_stops_gputide_run_gracefully(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    audit = tmp_path / "audit.jsonl"
    proc = subprocess.Popen(
        [sys.executable, "-m", "balancer.cli", "--log-level", "ERROR", "run", "--prometheus", "http://127.0.0.1:9",
         "--dry-run", "--interval", "200ms", "--metrics-port", "0", "--audit-log", str(audit)],
        cwd=os.path.dirname(os.path.dirname(os.path.dirname(__file__))))
    try:
        for _ in range(600):  # wait until the loop has run at least one (fail-static) cycle
            if audit.exists() and audit.read_text().strip():
                break
            try:
                proc.wait(timeout=0.1)
                break
            except subprocess.TimeoutExpired:
                pass
        assert proc.poll() is None, "the loop should keep running while Prometheus is down"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
    assert json.loads(audit.read_text().splitlines()[0])["outcome"] == "fail_static:telemetry_unavailable"
