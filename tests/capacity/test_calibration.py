"""`rpsPerReplica` calibrated from load and p99 history: the pure fit, the CSV path and the real Prometheus path.

The simulated service is an M/M/1 queue per replica (balancer.sim.workloads): p99 = base + ln(100) / (mu - load),
so the load per replica at which p99 reaches the SLO is known exactly: mu - ln(100) / (SLO - base).
"""

from __future__ import annotations

import math
import subprocess
import time

import numpy as np
import pytest

from balancer.cli import main
from balancer.plan.calibration import calibrate, settled

SLO, BASE = 0.5, 0.1


def mm1_p99(load, mu=40.0):
    return BASE + math.log(100.0) / np.maximum(mu - np.asarray(load, float), 1e-3)


def analytic(mu):
    return mu - math.log(100.0) / (SLO - BASE)


def test_noisy_p99s_give_the_slo_crossing_within_a_few_percent_and_not_above_it():
    rng = np.random.default_rng(0)
    load = rng.uniform(5, 35, 2000)
    p99 = np.minimum(mm1_p99(load), 60.0) * rng.lognormal(0.0, 0.1, load.size)
    c = calibrate(load, p99, SLO)
    assert c.bound == "measured"
    assert 0.95 * analytic(40.0) <= c.rps_per_replica <= 1.01 * analytic(40.0)
    assert c.support > 100 and c.samples == 2000
    ys = [p for _, p in c.curve]
    assert ys == sorted(ys), "the fitted p99 never falls as load grows"


def test_a_margin_aims_below_the_slo():
    load = np.linspace(5, 35, 500)
    full, tight = calibrate(load, mm1_p99(load), SLO), calibrate(load, mm1_p99(load), SLO, margin=0.8)
    assert tight.rps_per_replica == pytest.approx(40.0 - math.log(100.0) / (0.8 * SLO - BASE), rel=1e-3)
    assert tight.rps_per_replica < full.rps_per_replica


def test_a_service_that_never_got_slow_gives_only_a_lower_bound():
    load = np.linspace(2, 20, 200)  # the SLO is crossed at 28.5 req/s per replica: never reached
    c = calibrate(load, mm1_p99(load), SLO)
    assert (c.bound, c.rps_per_replica) == ("lower", pytest.approx(20.0))
    assert "at least" in c.reason


def test_one_slow_outlier_at_the_highest_load_is_not_a_measured_limit():
    load = np.linspace(2, 20, 200)
    p99 = mm1_p99(load)
    p99[-1] = 5.0  # a single slow scrape at the top of the range
    c = calibrate(load, p99, SLO)
    assert c.bound == "lower" and "only 1 sample" in c.reason
    many = p99.copy()
    many[-8:] = 5.0
    assert calibrate(load, many, SLO).bound == "measured"


@pytest.mark.parametrize(("load", "p99", "why"), [
    (np.linspace(30, 39, 100), None, "lightest observed load"),
    (np.linspace(5, 20, 10), None, "need 30"),
    (np.array([5.0, np.nan, -1.0, 10.0] * 10), np.array([np.nan, 0.2, 0.2, 0.0] * 10), "need 30"),
], ids=["slow-everywhere", "too-few", "unusable-samples"])
def test_no_estimate_when_the_data_cannot_support_one(load, p99, why):
    c = calibrate(load, mm1_p99(load) if p99 is None else p99, SLO)
    assert c.rps_per_replica is None and c.bound == "none" and why in c.reason


def test_samples_right_after_a_replica_change_are_dropped():
    t = np.arange(10) * 60.0
    assert settled(t, np.array([1, 1, 1, 2, 2, 2, 2, 2, 2, 3]), 120.0).tolist() == [
        False, False, True, False, False, True, True, True, True, False]
    assert settled(t, np.ones(10), 0.0).all()


# ---- from the simulator, through the command -------------------------------------------------------------------


def simulated_history(hours: float = 6.0):
    """A simulated service on A100 PCIe (mu = 16 req/s): load per replica ramps 1 -> 12, replicas 4 -> 5 once;
    the replicas recorded are those that serve (placed and warm), as the exporter's `..._replicas_ready`."""
    from balancer.fleet import scaled_fleet
    from balancer.sim import SimCluster
    from balancer.sim.workloads import ServiceSpec

    sim = SimCluster(scaled_fleet(16), seed=1)
    span = hours * 3600.0
    spec = ServiceSpec(name="chat", slo_latency_s=SLO, base_latency_s=BASE, rps_a100=20.0, replicas=4,
                       allowed_models=frozenset({"A100-PCIE-40GB"}), warmup_s=300.0,
                       demand=lambda t: 4.0 * (1.0 + 11.0 * t / span))
    sim.add_service(spec)
    rows = []
    for i in range(int(span / 60)):
        if i == 120:
            sim.scale_service("chat", 5)
        sim.step()
        st = sim.service_status()["chat"]
        rows.append((sim.time, st.demand_rps, sim.ready_replicas()["chat"], st.p99_latency_s))
    return np.array(rows), analytic(spec.rate_on("A100-PCIE-40GB"))


@pytest.fixture(scope="module")
def history():
    return simulated_history()


def test_the_command_reads_a_csv_and_finds_the_simulated_services_limit(history, tmp_path, capsys):
    rows, truth = history
    path = tmp_path / "chat.csv"
    path.write_text("timestamp,demand_rps,replicas,p99_s\n" + "\n".join(
        f"{1.7e9 + t:.0f},{d},{r:g},{p}" for t, d, r, p in rows))
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--csv", str(path), "--service", "chat", "--json", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "rpsPerReplica:" in printed and "measured" in printed
    import json

    got = json.loads(out.read_text())["services"]["chat"]
    assert got["rps_per_replica"] == pytest.approx(truth, rel=0.01)


def test_the_profiles_file_gives_each_service_its_slo_and_the_profile_value_to_compare(history, tmp_path):
    import json

    import yaml

    rows, truth = history
    csv = tmp_path / "chat.csv"
    csv.write_text("timestamp,demand_rps,replicas,p99_s\n" + "\n".join(
        f"{1.7e9 + t:.0f},{d},{r:g},{p}" for t, d, r, p in rows))
    profiles = tmp_path / "services.yaml"
    profiles.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles", "services": [
        {"name": "chat", "rpsPerReplica": 3, "latencySloSeconds": SLO}]}))
    out = tmp_path / "cal.json"
    assert main(["calibrate", "--csv", str(csv), "--services", str(profiles), "--json", str(out)]) == 0
    got = json.loads(out.read_text())["services"]["chat"]
    assert got["slo_s"] == SLO and got["profile_rps_per_replica"] == 3
    assert got["suggested_rps_per_replica"] == pytest.approx(truth, rel=0.01)  # measured: replaces the guess
    # a tighter SLO from the command line wins over the profile's
    assert main(["calibrate", "--csv", str(csv), "--services", str(profiles), "--slo", "0.45", "--json", str(out)]) == 0
    assert json.loads(out.read_text())["services"]["chat"]["rps_per_replica"] < truth


@pytest.mark.parametrize(("current", "bound", "estimate", "suggested"), [
    (3.0, "measured", 4.5, 4.5), (6.0, "measured", 4.5, 4.5),  # a measured limit replaces, up or down
    (3.0, "lower", 4.5, 4.5), (6.0, "lower", 4.5, 6.0),  # "at least 4.5" never lowers a profile
    (3.0, "none", None, 3.0), (None, "lower", 4.5, 4.5),
])
def test_what_the_command_suggests_for_the_profile(current, bound, estimate, suggested):
    from balancer.cmd.calibrate import suggestion
    from balancer.plan.calibration import Calibration

    c = Calibration(estimate, bound, SLO, 100, 10, 0, (1.0, 5.0), (), "")
    assert suggestion(current, c) == suggested


@pytest.mark.parametrize(("args", "shown"), [
    (["--margin", "1.5"], "--margin"),
    (["--slo", "0"], "--slo"),
    (["--settle", "soon"], "--settle"),
], ids=["margin", "slo", "settle"])
def test_bad_flags_exit_2_naming_the_flag(history, tmp_path, capsys, args, shown):
    path = tmp_path / "x.csv"
    path.write_text("timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n")
    assert main(["calibrate", "--csv", str(path), *args]) == 2
    assert shown in capsys.readouterr().err


@pytest.mark.parametrize(("text", "field", "value"), [
    ("timestamp,demand_rps,replicas\n0,1,1\n", "p99_s", "None"),
    ("timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n60,-3,1,0.2\n", "demand_rps", "-3"),
    ("timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n60,1,two,0.2\n", "replicas", "two"),
], ids=["missing-column", "negative", "not-a-number"])
def test_a_bad_csv_names_the_file_the_field_and_the_value(tmp_path, capsys, text, field, value):
    path = tmp_path / "bad.csv"
    path.write_text(text)
    assert main(["calibrate", "--csv", str(path)]) == 2
    err = capsys.readouterr().err
    assert str(path) in err and field in err and value in err


def test_too_little_data_exits_1_with_the_reason(tmp_path, capsys):
    path = tmp_path / "short.csv"
    path.write_text("timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n60,1,1,0.2\n")
    assert main(["calibrate", "--csv", str(path), "--settle", "0s"]) == 1
    assert "need 30" in capsys.readouterr().out


def openmetrics(rows, end: float) -> str:
    lines = []
    shift = end - rows[-1, 0]
    for name, col in (("gputide_inference_demand_rps", 1), ("gputide_inference_replicas_ready", 2),
                      ("gputide_inference_latency_p99_seconds", 3)):
        lines.append(f"# TYPE {name} gauge")
        lines += [f'{name}{{service="chat"}} {float(row[col])!r} {row[0] + shift:.0f}' for row in rows]
    return "\n".join([*lines, "# EOF", ""])


@pytest.mark.integration
def test_the_command_reads_the_history_from_a_real_prometheus(history, tmp_path, capsys, prometheus_factory,
                                                              promtool):
    rows, truth = history
    end = float(int(time.time()) - 7200)  # clear of the head block Prometheus opens at start
    (tmp_path / "history.om").write_text(openmetrics(rows, end))
    data = tmp_path / "prom" / "data"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", str(tmp_path / "history.om"), str(data)],
                   check=True, capture_output=True)
    prom = prometheus_factory([], directory=tmp_path / "prom", retention="30d")
    span_h = (rows[-1, 0] - rows[0, 0]) / 3600 + 1
    args = ["calibrate", "--prometheus", prom.url, "--range", f"{span_h:.0f}h", "--end", f"{end:.0f}",
            "--json", str(tmp_path / "cal.json")]
    assert main([*args, "--service", "chat"]) == 0
    import json

    got = json.loads((tmp_path / "cal.json").read_text())["services"]["chat"]
    assert got["bound"] == "measured" and got["rps_per_replica"] == pytest.approx(truth, rel=0.01)
    assert got["samples"] >= 300
    # a service Prometheus knows nothing about: no estimate, exit 1
    assert main([*args, "--service", "nobody"]) == 1
    assert "need 30" in capsys.readouterr().out
