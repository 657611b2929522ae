"""`gputide simulate` end to end, the hotspot claim, and `gputide run` input errors."""

from __future__ import annotations

import csv
import json
from pathlib import Path

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
               "--print", "json", "--out", str(out)])
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


SERVEGEN = Path(__file__).resolve().parents[2] / "balancer" / "data" / "servegen-language" / "m-small"


@pytest.mark.parametrize(("trace", "expected"), [
    (None, None),
    ("FILE", "csv"),
    ("DIR", "servegen"),
], ids=["no trace", "a file is csv", "a folder is servegen"])
def test_trace_format_is_guessed_from_the_path(trace, expected, tmp_path):
    path = {"FILE": tmp_path / "d.csv", "DIR": tmp_path}.get(trace)
    if trace == "FILE":
        path.write_text("timestamp,value\n")
    assert scenarios.guess_trace_format(None if path is None else str(path)) == expected


def test_cli_trace_formats_are_the_loaders_formats():
    from balancer.forecast.traces import FORMATS

    assert scenarios.TRACE_FORMATS == FORMATS


@pytest.fixture
def recording_scenarios(monkeypatch):
    """Two throw-away scenarios that record the keywords their setup received: a current and a legacy setup."""
    seen: dict[str, dict] = {}

    def current(sim, *, days, seed, trace=None, trace_format=None):
        seen["current"] = {"trace": trace, "trace_format": trace_format}
        return []

    def legacy(sim, *, days, seed, trace=None):
        seen["legacy"] = {"trace": trace}
        return []

    def fmt_spelling(sim, *, days, seed, trace=None, fmt=None):
        seen["fmt"] = {"trace": trace, "fmt": fmt}
        return []

    for name, setup in (("current", current), ("legacy", legacy), ("fmt", fmt_spelling)):
        monkeypatch.setitem(scenarios.SCENARIOS, name, scenarios.Scenario(
            name, "test", scenarios.hotspot_fleet, setup, default_days=0.01))
    return seen


@pytest.mark.parametrize(("argv", "scenario", "expected"), [
    (["--trace", "TRACE", "--format", "requests"], "current", {"trace": "TRACE", "trace_format": "requests"}),
    (["--trace", "TRACE"], "current", {"trace": "TRACE", "trace_format": "csv"}),
    ([], "current", {"trace": None, "trace_format": None}),
    ([], "legacy", {"trace": None}),
    (["--trace", "TRACE"], "legacy", {"trace": "TRACE"}),
    (["--trace", "TRACE", "--format", "csv"], "legacy", {"trace": "TRACE"}),
    (["--trace", "TRACE", "--format", "servegen"], "fmt", {"trace": "TRACE", "fmt": "servegen"}),
], ids=["explicit format", "guessed csv", "no trace no format", "legacy setup without the keyword",
        "legacy setup with a trace", "legacy setup with the guessed format",
        "setup spelling it fmt"])
def test_simulate_passes_the_trace_format_to_the_scenario_setup(argv, scenario, expected, recording_scenarios,
                                                                 tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n")
    argv = [str(trace) if a == "TRACE" else a for a in argv]
    rc = main(["--log-level", "WARNING", "simulate", "--scenario", scenario, "--policy", "none", "--no-plots",
               "--print", "json", "--out", str(tmp_path / "o"), *argv])
    assert rc == 0
    assert recording_scenarios[scenario] == {k: str(trace) if v == "TRACE" else v for k, v in expected.items()}


def test_a_format_for_a_setup_that_reads_none_is_an_input_error(recording_scenarios, tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n")
    rc = main(["simulate", "--scenario", "legacy", "--policy", "none", "--trace", str(trace), "--format",
               "requests", "--out", str(tmp_path / "o")])
    assert rc == EXIT_INPUT_ERROR
    assert "--format" in capsys.readouterr().err


@pytest.mark.skipif(not SERVEGEN.is_dir(), reason="the bundled ServeGen trace is missing")
def test_hotspot_scenario_runs_on_a_servegen_folder(tmp_path, capsys):
    rc = main(["--log-level", "WARNING", "simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.02",
               "--trace", str(SERVEGEN), "--no-plots", "--print", "json", "--out", str(tmp_path / "o")])
    assert rc == 0
    summary = json.loads(capsys.readouterr().out)
    assert summary["inference"]["requests"] > 0


@pytest.mark.parametrize("argv", [
    ["simulate", "--scenario", "nope", "--policy", "gputide", "--out", "X"],
    ["simulate", "--scenario", "hotspot", "--policy", "magic", "--out", "X"],
    ["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "-1", "--out", "X"],
    ["simulate", "--scenario", "hotspot", "--policy", "none", "--cluster", "/nonexistent.yaml", "--out", "X"],
    ["simulate", "--scenario", "hotspot", "--policy", "none", "--trace", "/nonexistent.csv", "--out", "X"],
    ["run", "--prometheus", "http://127.0.0.1:1", "--interval", "soon", "--once", "--dry-run"],
    ["run", "--prometheus", "http://127.0.0.1:1", "--once", "--dry-run", "--policy", "/nonexistent.yaml"],
], ids=["unknown scenario", "unknown policy", "negative days", "missing fleet spec", "missing trace", "bad interval",
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


@pytest.mark.skipif(not SERVEGEN.is_dir(), reason="the bundled ServeGen trace is missing")
@pytest.mark.parametrize(("fmt", "rc"), [(["--format", "servegen"], 0), ([], 0), (["--format", "csv"], 2)],
                         ids=["explicit servegen", "a folder is guessed servegen", "a folder read as csv"])
def test_tidal_scenario_reads_the_trace_in_the_format_asked(fmt, rc, tmp_path, capsys):
    argv = ["--log-level", "ERROR", "simulate", "--scenario", "tidal", "--policy", "static", "--days", "0.02",
            "--trace", str(SERVEGEN), *fmt, "--no-plots", "--print", "json", "--out", str(tmp_path / "o")]
    assert main(argv) == rc
    if rc == 0:
        assert json.loads(capsys.readouterr().out)["scenario"] == "tidal"
