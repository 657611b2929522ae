"""`gputide calibrate` on history as production keeps it: an incident's few slow minutes at a light load, and replica
counts that go missing or to 0 in between (a scrape outage, a rollout). Neither may move the estimate."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from balancer.cmd.calibrate import estimate
from balancer.plan.calibration import calibrate, settled

SLO = 0.5


def healthy(n: int = 600, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """Ten hours at 5-18 req/s per replica, p99 about 0.2 s: the service never got near its SLO."""
    rng = np.random.default_rng(seed)
    load = rng.uniform(5, 18, n)
    return load, 0.2 + 0.02 * load / 18 + rng.normal(0, 0.01, n)


@pytest.mark.parametrize("minutes", [6, 30, 60], ids=["six minutes", "half an hour", "an hour"])
def test_an_incident_at_a_light_load_is_not_a_measured_limit(minutes):
    load, p99 = healthy()
    rng = np.random.default_rng(2)
    # a node problem for a few minutes at an ordinary 8 req/s per replica: p99s of 30 s
    c = calibrate(np.r_[load, rng.uniform(7.5, 8.5, minutes)], np.r_[p99, np.full(minutes, 30.0)], SLO)
    assert c.bound == "lower" and c.rps_per_replica == pytest.approx(load.max())


def test_a_real_limit_is_still_measured_beside_an_incident():
    rng = np.random.default_rng(3)
    load = rng.uniform(5, 30, 1500)
    p99 = 0.1 + np.log(100.0) / np.maximum(40.0 - load, 1e-3)  # M/M/1, mu 40: limit 28.49 req/s per replica
    c = calibrate(np.r_[load, rng.uniform(7.5, 8.5, 10)], np.r_[p99, np.full(10, 30.0)], SLO)
    assert c.bound == "measured" and c.rps_per_replica == pytest.approx(40.0 - np.log(100.0) / 0.4, rel=0.01)


def frame(replicas: np.ndarray) -> pd.DataFrame:
    """One sample a minute; 10 req/s per replica whenever replicas are known, p99 well within the SLO."""
    t = np.arange(replicas.size) * 60.0
    demand = 10.0 * np.nan_to_num(replicas, nan=4.0)
    return pd.DataFrame({"t": t, "demand": demand, "replicas": replicas, "p99": np.full(t.size, 0.2)})


@pytest.mark.parametrize("between", [np.nan, 0.0], ids=["count missing", "scaled to 0"])
def test_samples_right_after_the_count_was_unknown_or_zero_wait_for_the_settle_time(between):
    replicas = np.full(60, 4.0)
    replicas[30:35] = between  # 5 minutes without a count (or at 0), then 4 again: a new set of warming replicas
    c = estimate(frame(replicas), SLO, 1.0, 300.0)
    # the first 5 minutes (history unknown), the 5 without a count and the 5 after it are not used
    assert c.samples == 60 - 5 - 5 - 5


def test_a_gap_in_time_counts_as_a_change():
    t = np.r_[np.arange(10), np.arange(20, 30)] * 60.0  # ten minutes with no sample at all
    keep = settled(t, np.full(t.size, 4.0), 120.0)
    assert keep.tolist() == [False, False, *[True] * 8, False, False, *[True] * 8]


@pytest.mark.parametrize("top", [10000.0, 0.00005, 29.4449], ids=["ten thousand", "tiny", "ordinary"])
def test_the_printed_profile_snippet_reads_back_as_a_number_not_above_the_estimate(tmp_path, capsys, top):
    import yaml

    from balancer.cli import main

    load = np.linspace(top / 2, top, 60)  # never slow: a lower bound at the highest load seen, `top`
    path = tmp_path / "chat.csv"
    path.write_text("timestamp,demand_rps,replicas,p99_s\n" + "".join(
        f"{1.7e9 + 60 * i:.0f},{float(2 * x)!r},2,0.2\n" for i, x in enumerate(load)))
    assert main(["calibrate", "--csv", str(path), "--service", "chat", "--settle", "0s"]) == 0
    out = capsys.readouterr().out
    snippet = yaml.safe_load(out[out.index("services:"):])
    got = snippet["services"][0]["rpsPerReplica"]
    assert isinstance(got, int | float), f"{got!r}: YAML reads it as a string, the profile loader refuses it"
    assert top * (1 - 1e-3) <= got <= top


def test_a_latency_query_in_milliseconds_is_named_as_the_likely_cause():
    load, p99 = healthy()
    c = calibrate(load, p99 * 1000.0, SLO)  # 200 "s": the query gave milliseconds
    assert c.bound == "none" and "milliseconds" in c.reason and "205.3 s" in c.reason
    assert "milliseconds" not in calibrate(load, p99 + 0.5, SLO).reason  # merely slow: no such guess


class FakeSource:
    """Stands in for PrometheusTelemetrySource: records the PromQL, answers with no data."""

    queries: list[str] = []

    def __init__(self, options):
        pass

    def demand_history(self, promql, start, end, step_s):
        FakeSource.queries.append(promql)
        index = pd.date_range(pd.Timestamp(int(start), unit="s", tz="UTC"), periods=3, freq=f"{int(step_s)}s")
        return pd.Series(np.nan, index=index)


def test_cluster_selects_one_clusters_series_in_every_query(monkeypatch, capsys):
    from balancer.cli import main

    FakeSource.queries = []
    monkeypatch.setattr("balancer.telemetry.prometheus.PrometheusTelemetrySource", FakeSource)
    assert main(["calibrate", "--prometheus", "http://prometheus:9090", "--service", "team-a/chat",
                 "--cluster", "eu-1", "--range", "1h"]) == 1  # no data: no estimate
    assert len(FakeSource.queries) == 3
    assert all('service="chat", namespace="team-a", cluster="eu-1"' in q for q in FakeSource.queries)


@pytest.mark.parametrize(("argv", "shown"), [
    (["--prometheus", "http://p:9090", "--service", "chat", "--cluster", 'eu"1'], "--cluster"),
    (["--csv", "x.csv", "--cluster", "eu-1"], "--cluster"),
], ids=["a quote would break the PromQL", "a CSV has no clusters"])
def test_a_cluster_that_cannot_apply_exits_2(capsys, argv, shown):
    from balancer.cli import main

    assert main(["calibrate", *argv]) == 2
    assert shown in capsys.readouterr().err


class HistorySource(FakeSource):
    """chat: two hours at 10 -> 40 req/s per replica on 2 replicas, p99 0.2 s (never slow); nothing for search."""

    def demand_history(self, promql, start, end, step_s):
        index = pd.date_range(pd.Timestamp(int(start), unit="s", tz="UTC"), periods=120, freq=f"{int(step_s)}s")
        if 'service="chat"' not in promql:
            return pd.Series(np.nan, index=index)
        values = {"demand": 2 * np.linspace(10.0, 40.0, 120), "replicas": np.full(120, 2.0),
                  "p99": np.full(120, 0.2)}
        kind = "demand" if "demand" in promql else "replicas" if "replicas" in promql else "p99"
        return pd.Series(values[kind], index=index)


def test_write_services_gives_a_profiles_file_the_controller_loads_with_the_suggestions(tmp_path, capsys,
                                                                                        monkeypatch):
    import yaml

    from balancer.app.capacity_run import load_profiles
    from balancer.cli import main

    monkeypatch.setattr("balancer.telemetry.prometheus.PrometheusTelemetrySource", HistorySource)
    profiles = tmp_path / "services.yaml"
    profiles.write_text(yaml.safe_dump({"apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles", "services": [
        {"name": "chat", "rpsPerReplica": 30, "warmupSeconds": 120, "minReplicas": 2, "maxReplicas": 40,
         "latencySloSeconds": 0.5},
        {"name": "search", "rpsPerReplica": 12, "minReplicas": 1, "maxReplicas": 8}]}))
    out = tmp_path / "calibrated.yaml"
    # chat: a lower bound of 40 raises its 30; search: no samples, its profile kept (and exit 1: one has no estimate)
    assert main(["calibrate", "--prometheus", "http://prometheus:9090", "--services", str(profiles), "--range", "2h",
                 "--settle", "0s", "--write-services", str(out)]) == 1
    got, before = load_profiles(str(out)), load_profiles(str(profiles))
    assert got["chat"].rps_per_replica == 40 and got["search"].rps_per_replica == 12
    assert got["chat"].warmup_s == before["chat"].warmup_s and got["search"] == before["search"]
    assert str(out) in capsys.readouterr().out


def test_write_services_needs_the_profiles_file_it_rewrites(tmp_path, capsys):
    from balancer.cli import main

    assert main(["calibrate", "--csv", "x.csv", "--write-services", str(tmp_path / "out.yaml")]) == 2
    assert "--write-services" in capsys.readouterr().err
