"""`gputide run --stale-after`: how old a GPU's newest reading may be before the controller holds still.

Since d6922fa `gpu:last_sample:timestamp_seconds` is the scrape's own time, so a reading's age reaches the scrape
interval plus the rules' 15 s evaluation. The telemetry source's fixed limit of four 15 s scrapes (60 s) then held
the controller still now and then wherever GPUs are scraped every 60 s (a common dcgm-exporter ServiceMonitor
interval: 75 s old readings are normal there), and nothing could change it. The limit is now `--stale-after`, by
default the policy's `spec.safety.maxTelemetryAgeS` (120 s): the limit the safety guard already applied to every
snapshot, and the age GpuTelemetryStale fires at. It is refused below 45 s and above maxTelemetryAgeS.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import pytest
import yaml

from balancer.cli import main
from balancer.cmd import run as run_cmd
from balancer.errors import StaleTelemetry
from balancer.metrics import ControllerMetrics
from tests.telemetry.test_telemetry_prometheus_unit import NOW, FakeClient

PROM = "http://127.0.0.1:1"   # nothing answers there: every case must fail before a query
ALERTS = Path(__file__).resolve().parents[2] / "rules" / "gputide-alerts.yaml"


def reconciler(tmp_path, *argv: str, max_age_s: float | None = None):
    parser = argparse.ArgumentParser()
    run_cmd.register(parser.add_subparsers())
    extra = []
    if max_age_s is not None:
        policy = tmp_path / "policy.yaml"
        policy.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy",
                                          "metadata": {"name": "t"},
                                          "spec": {"safety": {"maxTelemetryAgeS": max_age_s}}}))
        extra = ["--policy", str(policy)]
    args = parser.parse_args(["run", "--prometheus", PROM, "--dry-run", *extra, *argv])
    return run_cmd.build_reconciler(args, ControllerMetrics())


def read_after(rec, age_s: float):
    """The snapshot the reconciler's source takes when the oldest GPU's newest reading is `age_s` old."""
    rec.source.client = FakeClient(values={("GPU-a0", "last_sample"): NOW - age_s})
    rec.source.clock = lambda: NOW
    return rec.source.snapshot()


def test_by_default_readings_of_a_60s_scrape_are_fresh_and_the_policys_limit_applies(tmp_path):
    rec = reconciler(tmp_path)
    assert read_after(rec, 75).sample_age_s.max() == pytest.approx(75)   # a 60 s scrape + the rules' 15 s
    with pytest.raises(StaleTelemetry, match="older than 120s"):
        read_after(rec, 121)


def test_the_default_follows_the_policys_max_telemetry_age(tmp_path):
    rec = reconciler(tmp_path, max_age_s=300)
    assert read_after(rec, 299).sample_age_s.max() == pytest.approx(299)
    with pytest.raises(StaleTelemetry, match="older than 300s"):
        read_after(rec, 301)


def test_stale_after_sets_the_sources_limit(tmp_path):
    rec = reconciler(tmp_path, "--stale-after", "1m")
    assert read_after(rec, 59).sample_age_s.max() == pytest.approx(59)
    with pytest.raises(StaleTelemetry, match="older than 60s"):
        read_after(rec, 75)


@pytest.mark.parametrize("value", ["44s", "30s", "0", "-1m", "121s", "3m", "inf", "nan", "soon"])
def test_a_stale_after_out_of_range_exits_2_naming_the_flag(capsys, value):
    assert main(["run", "--prometheus", PROM, "--dry-run", "--once", "--metrics-port", "0",
                 f"--stale-after={value}"]) == 2
    err = capsys.readouterr().err
    assert f"field '--stale-after': invalid value '{value}'; allowed: a duration from 45s" in err, err
    assert "to 120s (the policy's spec.safety.maxTelemetryAgeS" in err, err


def test_a_longer_stale_after_needs_the_policys_limit_raised_too(tmp_path):
    rec = reconciler(tmp_path, "--stale-after", "4m", max_age_s=600)
    assert read_after(rec, 239).sample_age_s.max() == pytest.approx(239)


def test_a_policy_limit_below_the_floor_exits_2_naming_the_policy_field(tmp_path, capsys):
    policy = tmp_path / "policy.yaml"
    policy.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy",
                                      "metadata": {"name": "t"}, "spec": {"safety": {"maxTelemetryAgeS": 30}}}))
    assert main(["run", "--prometheus", PROM, "--dry-run", "--once", "--metrics-port", "0", "--policy",
                 str(policy)]) == 2
    err = capsys.readouterr().err
    assert f"{policy}: field 'spec.safety.maxTelemetryAgeS': invalid value 30.0; allowed: >= 45" in err, err


def test_the_default_is_the_age_gpu_telemetry_stale_fires_at():
    """The alert and the controller agree: readings past 120 s are both alerted on and not acted on."""
    groups = yaml.safe_load(ALERTS.read_text(encoding="utf-8"))["groups"]
    rule = next(r for g in groups for r in g["rules"] if r.get("alert") == "GpuTelemetryStale")
    assert "gpu:last_sample:timestamp_seconds) > 120" in rule["expr"]
    from balancer.config import BalancerPolicy

    assert run_cmd.stale_after(None, BalancerPolicy(), None) == 120.0


@pytest.mark.parametrize(("spec", "field"), [({"safety": {"maxTelemetryAgeS": 30}}, "spec.safety.maxTelemetryAgeS"),
                                             ({"capacity": {"enabled": True}}, "capacity.enabled")],
                         ids=["telemetry age below the floor", "capacity without --services"])
def test_a_reload_gputide_run_would_refuse_at_its_next_start_keeps_the_running_policy(tmp_path, spec, field):
    """The policy file's own rules passed these, so a reload applied them, and the next restart exited 2."""
    rec = reconciler(tmp_path, max_age_s=120)
    path = tmp_path / "policy.yaml"
    path.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy",
                                    "metadata": {"name": "t"}, "spec": spec}))
    reloader = rec.policy_source.__self__
    assert reloader.poll() is None
    assert reloader.current.safety.max_telemetry_age_s == 120 and not reloader.current.capacity.enabled
    assert field in reloader.last_error
