"""`gputide run` with capacity shifting: the ServiceProfiles file, its errors (exit 2, naming file, field, value),
the flags, and the demand history read from a real Prometheus that seeds the forecaster and the burst tracker."""

from __future__ import annotations

import threading
import time

import pandas as pd
import pytest
import yaml

from balancer.app.capacity_run import PrometheusDemandHistory, RiseTracker, load_profiles
from balancer.cli import build_parser, main
from balancer.cmd.run import build_reconciler
from balancer.errors import InputError
from balancer.forecast.service import ServiceForecaster
from balancer.metrics import ControllerMetrics

GOOD = {"apiVersion": "gputide/v1alpha1", "kind": "ServiceProfiles", "services": [
    {"name": "llm-chat", "rpsPerReplica": 30, "warmupSeconds": 240, "minReplicas": 2, "maxReplicas": 40,
     "gpuModels": ["H100-SXM"], "homeReplicas": 24, "latencySloSeconds": 2},
    {"name": "embed", "rpsPerReplica": 120.5}]}


def write(tmp_path, doc, name="services.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return str(path)


def policy_file(tmp_path, enabled=True):
    return write(tmp_path, {"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy", "metadata": {"name": "t"},
                            "spec": {"capacity": {"enabled": enabled}}}, "policy.yaml")


def test_profiles_load_with_defaults_for_what_is_left_out(tmp_path):
    profiles = load_profiles(write(tmp_path, GOOD))
    chat, embed = profiles["llm-chat"], profiles["embed"]
    assert (chat.rps_per_replica, chat.warmup_s, chat.min_replicas, chat.max_replicas) == (30.0, 240.0, 2, 40)
    assert chat.models == frozenset({"H100-SXM"}) and chat.home_replicas == 24
    assert embed.rps_per_replica == 120.5 and embed.warmup_s == 300.0 and embed.models is None


def _bad(path, value):
    doc = yaml.safe_load(yaml.safe_dump(GOOD))
    parent = doc
    *head, last = path
    for key in head:
        parent = parent[key]
    if value is KeyError:
        del parent[last]
    else:
        parent[last] = value
    return doc


@pytest.mark.parametrize(("doc", "field", "shown"), [
    (_bad(["kind"], "FleetSpec"), "kind", "FleetSpec"),
    (_bad(["services"], []), "services", "[]"),
    (_bad(["services", 0, "rpsPerReplica"], 0), "services[0].rpsPerReplica", "0"),
    (_bad(["services", 0, "rpsPerReplica"], KeyError), "services[0].rpsPerReplica", "None"),
    (_bad(["services", 1, "minReplicas"], 1.5), "services[1].minReplicas", "1.5"),
    (_bad(["services", 0, "minReplicas"], 50), "services[0].minReplicas", "50"),
    (_bad(["services", 0, "gpuModels"], ["Z80"]), "services[0].gpuModels", "Z80"),
    (_bad(["services", 1, "name"], "llm-chat"), "services[1].name", "llm-chat"),
    (_bad(["services", 1, "replicas"], 3), "services[1].replicas", "3"),
    # scaled to zero, vLLM reports no demand for it, so the controller could never bring it back
    (_bad(["services", 0, "minReplicas"], 0), "services[0].minReplicas", "never see it to bring it back"),
], ids=["kind", "empty", "zero-rate", "missing-rate", "fractional-replicas", "min-above-max", "unknown-model",
        "duplicate-name", "unknown-field", "scale-to-zero"])
def test_bad_profiles_name_the_file_the_field_and_the_value(tmp_path, doc, field, shown):
    path = write(tmp_path, doc)
    with pytest.raises(InputError) as err:
        load_profiles(path)
    assert err.value.file == path and err.value.field == field
    assert shown in str(err.value) and "allowed" in str(err.value)


@pytest.mark.parametrize(("extra", "enabled", "field"), [
    ([], True, "capacity.enabled"),
    (["--services", "SERVICES"], False, "capacity.enabled"),
    (["--services", "SERVICES", "--forecast-model", "prophet"], True, "--forecast-model"),
    (["--services", "SERVICES", "--forecast-history=0d"], True, "--forecast-history"),
], ids=["enabled-without-services", "services-without-enabled", "unknown-model", "bad-history"])
def test_inconsistent_capacity_flags_exit_2_naming_the_field(tmp_path, capsys, extra, enabled, field):
    services = write(tmp_path, GOOD)
    argv = ["run", "--prometheus", "http://127.0.0.1:9", "--once", "--dry-run", "--metrics-port", "0",
            "--policy", policy_file(tmp_path, enabled), *[services if a == "SERVICES" else a for a in extra]]
    assert main(argv) == 2
    assert field in capsys.readouterr().err


def test_capacity_flags_build_the_capacity_planner_and_a_seeded_forecaster(tmp_path):
    args = build_parser().parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--policy",
                                      policy_file(tmp_path), "--services", write(tmp_path, GOOD),
                                      "--forecast-model", "profile", "--forecast-history", "2d"])
    rec = build_reconciler(args, ControllerMetrics())
    assert set(rec.planner.profiles) == {"llm-chat", "embed"}
    assert isinstance(rec.forecaster, ServiceForecaster) and rec.forecaster.online.model == "profile"
    assert rec.forecaster.history.days == 2.0
    # the forecast reaches over the loan horizon (2 h at 300 s steps) from now, though it is issued at the start of
    # the last complete bucket (up to 2 steps before now): without the margin its last 10 minutes were cut off
    assert (rec.forecaster.steps - 2) * rec.forecaster.online.step_s >= 7200
    # latency pressure is judged against each profile's own SLO (0.5 s when the profile leaves it out)
    assert rec.source.slo_latency_s == {"llm-chat": 2.0, "embed": 0.5}
    assert rec.source.default_slo_latency_s == 0.5  # services without a profile: the policy's colocation.latencySloS


def test_services_without_a_profile_take_the_policys_latency_slo(tmp_path):
    policy = write(tmp_path, {"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy", "metadata": {"name": "t"},
                              "spec": {"colocation": {"latencySloS": 2.5}}}, "policy.yaml")
    args = build_parser().parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--policy", policy])
    source = build_reconciler(args, ControllerMetrics()).source
    assert (source.slo_latency_s, source.default_slo_latency_s) == ({}, 2.5)


@pytest.mark.parametrize(("service", "query"), [
    ("chat", 'max(gputide_inference_demand_rps{service="chat"})'),
    ("team-a/vllm", 'max(gputide_inference_demand_rps{service="vllm", namespace="team-a"})'),
], ids=["bare name", "namespace/name, as an ambiguous owner is qualified"])
def test_per_service_queries_fill_in_the_name_the_namespace_and_their_selector(service, query):
    from balancer.app.capacity_run import DEFAULT_DEMAND_QUERY, service_query

    assert service_query(DEFAULT_DEMAND_QUERY, service) == query
    ns, _, name = service.rpartition("/")
    assert service_query('rate(http_requests_total{app="$service", ns="$namespace"}[5m])', service) == (
        f'rate(http_requests_total{{app="{name}", ns="{ns}"}}[5m])')
    # under --cluster, one Prometheus holding several clusters: only this cluster's demand
    assert service_query(DEFAULT_DEMAND_QUERY, service, "eu-1") == query.replace("})", ', cluster="eu-1"})')


def test_rise_tracker_learns_bursts_from_seeded_history_before_watching():
    idx = pd.date_range("2024-01-01", periods=12, freq="60s", tz="UTC")
    tracker = RiseTracker(lead_s=120.0, window_s=86400.0, cap=3.0)
    tracker.seed(pd.Series([100.0] * 5 + [150.0] + [100.0] * 6, index=idx))
    now = idx[-1].timestamp() + 60
    tracker.observe(now, 100.0)
    assert tracker.allowance(now) == pytest.approx(0.5)


@pytest.mark.integration
def test_demand_history_comes_from_the_real_prometheus_and_feeds_the_forecaster(prometheus_factory):
    from balancer.app import scenarios, tidal  # noqa: F401 - importing tidal registers the scenario
    from balancer.forecast.online import DemandForecaster
    from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
    from balancer.telemetry.promserver import Target
    from exporters.backends.sim import SimBackend
    from exporters.collector import GpuCollector
    from exporters.server import serve
    from tests.conftest import require_binary

    require_binary("prometheus")
    sim, _events, _days = scenarios.build("tidal", days=1)
    exporter = serve(GpuCollector(SimBackend(sim, lock=threading.Lock())), port=0)
    try:
        prom = prometheus_factory([Target("gputide-exporter", f"127.0.0.1:{exporter.port}")], scrape_interval="1s")
        service = sorted(sim.service_status())[0]
        prom.wait_for(f'gputide_inference_demand_rps{{service="{service}"}}', bool, timeout=30)
        time.sleep(3)  # a few scrapes
        source = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0))
        history = PrometheusDemandHistory(source, days=1.0, step_s=1.0)
        now = time.time()
        past = history(service, now)
        assert past is not None and past.notna().sum() >= 2
        assert abs(past.dropna().iloc[-1] - sim.service_status()[service].demand_rps) < 1e-6 * max(
            1.0, sim.service_status()[service].demand_rps)
        assert history("no-such-service", now) is None  # Prometheus has nothing: learn from what is observed
        online = DemandForecaster(model="persistence", step_s=1.0, min_history=2)
        ServiceForecaster(online, 10.0, history=history)._seed(service, now)
        assert online.forecast(service, now, 5).quantiles[0.5][0] > 0
    finally:
        exporter.close()


def test_history_coarser_than_the_burst_lead_still_teaches_bursts_once_put_on_the_cycle_grid():
    """10-minute history, a 6-minute lead: no two raw samples fall within one lead, so without the grid the
    tracker would learn no burst at all and loan as if demand never jumped."""
    idx = pd.date_range("2024-01-01", periods=6, freq="600s", tz="UTC")
    past = pd.Series([100.0, 100.0, 200.0, 200.0, 100.0, 100.0], index=idx)
    now = idx[-1].timestamp() + 600
    raw, grid = (RiseTracker(lead_s=360.0, window_s=86400.0, cap=3.0) for _ in range(2))
    raw.seed(past)
    grid.seed(past, every_s=60.0)
    assert raw.allowance(now) == 0.0
    assert grid.allowance(now) == pytest.approx(0.6)  # 100 -> 160 within 6 of the 10 interpolated minutes


def test_demand_history_is_shared_within_a_cycle_and_a_failed_query_is_asked_again():
    """A Prometheus error at start-up was cached for good (the service never got its history, even once Prometheus
    was back), and every service's two weeks of demand were kept for ever. A failure is not cached now, and an
    answer only for `CACHE_S`: enough for the forecaster and the burst tracker to share one query per sighting."""
    from balancer.errors import TelemetryUnavailable

    answers = [TelemetryUnavailable("prometheus down"),
               pd.Series([1.0, 2.0], index=pd.date_range("2024-01-01", periods=2, freq="300s", tz="UTC"))]
    asked = []

    class Source:
        def demand_history(self, promql, start, end, step):
            asked.append(end)
            answer = answers[min(len(asked) - 1, 1)]
            if isinstance(answer, Exception):
                raise answer
            return answer

    history = PrometheusDemandHistory(Source())
    assert history("chat", 1000.0) is None
    assert history("chat", 1001.0) is not None and len(asked) == 2   # asked again after the failure
    assert history("chat", 1002.0) is not None and len(asked) == 2   # shared within the cycle
    assert history("chat", 1001.0 + PrometheusDemandHistory.CACHE_S) is not None and len(asked) == 3
    assert list(history.cache) == ["chat"]


def test_the_policys_forecast_timezone_reaches_the_loops_forecaster(tmp_path):
    """`forecast.timezone` in the policy is the calendar of the forecaster the loop runs (seasonal lags and
    calendar features at local wall-clock time); the loop once built it in UTC whatever the policy said."""
    policy = write(tmp_path, {"apiVersion": "gputide/v1alpha1", "kind": "BalancerPolicy", "metadata": {"name": "t"},
                              "spec": {"capacity": {"enabled": True}, "forecast": {"timezone": "Europe/Berlin"}}},
                   "policy.yaml")
    args = build_parser().parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--policy", policy,
                                      "--services", write(tmp_path, GOOD)])
    assert build_reconciler(args, ControllerMetrics()).forecaster.online.timezone == "Europe/Berlin"
