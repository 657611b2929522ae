"""PrometheusTelemetrySource against a fake PromQL client: good data becomes a snapshot, bad data a typed error."""

from __future__ import annotations

import math

import numpy as np
import pytest
import requests

from balancer import catalog
from balancer.errors import InvalidTelemetry, MissingTelemetry, StaleTelemetry, TelemetryUnavailable
from balancer.model import WorkloadClass
from balancer.telemetry.prometheus import FIELDS, FLAGS, PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.serving import P99_BEYOND_BUCKETS_S

NOW = 1_700_000_000.0
GPUS = [("node-b", "0", "GPU-b0", "NVIDIA L40S"), ("node-a", "1", "GPU-a1", "NVIDIA H100 80GB HBM3"),
        ("node-a", "0", "GPU-a0", "NVIDIA H100 80GB HBM3")]
BASE = {"temperature_c": 60.0, "memory_temperature_c": 66.0, "slowdown_temp_c": 87.0, "power_w": 300.0,
        "power_limit_w": 700.0, "sm_active": 0.5, "mem_used_mib": 1024.0 * 1048576, "mem_free_mib": 2048.0 * 1048576,
        "sm_clock_mhz": 1.98e9, "clock_event_reasons": 0.0, "xid": 0.0, "last_sample": NOW - 5}


class FakeClient:
    def __init__(self, values=None, drop=(), workloads=(), fail=False, serving=None, flags=None):
        self.values = values or {}
        self.flags = flags or {}   # (UUID, flag) -> value: flags are series only some GPUs have
        self.drop = set(drop)
        self.workloads = workloads
        self.fail = fail
        self.serving = serving or {"gputide_inference_demand_rps": "12"}

    def custom_query(self, promql):
        if self.fail:
            raise requests.ConnectionError("connection refused")
        if promql.startswith("gputide_gpu_workload_info"):
            return [{"metric": {"UUID": u, "namespace": ns, "pod": pod, "workload_class": c}, "value": [NOW, "1"]}
                    for u, ns, pod, c in self.workloads]
        if "gputide_inference" in promql:
            if isinstance(self.serving, list):  # full label sets
                return [{"metric": m, "value": [NOW, v]} for m, v in self.serving]
            return [{"metric": {"__name__": k, "service": "chat"}, "value": [NOW, v]} for k, v in self.serving.items()]
        rows = []
        for host, gpu, uuid, model in GPUS:
            for name, (rule, _) in FIELDS.items():
                if (uuid, name) in self.drop:
                    continue
                value = self.values.get((uuid, name), BASE[name])
                rows.append({"metric": {"__name__": rule, "hostname": host, "gpu": gpu, "UUID": uuid,
                                        "modelName": model}, "value": [NOW, str(value)]})
            rows += [{"metric": {"__name__": rule, "hostname": host, "gpu": gpu, "UUID": uuid, "modelName": model},
                      "value": [NOW, str(self.flags[uuid, name])]}
                     for name, (rule, _) in FLAGS.items() if (uuid, name) in self.flags]
        return rows


def source(client, **opts):
    return PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15, **opts),
                                     client=client, clock=lambda: NOW)


def test_good_data_becomes_a_sorted_snapshot_in_base_units():
    snap = source(FakeClient(workloads=[("GPU-a1", "ml", "infer-0", "inference"),
                                        ("GPU-b0", "ml", "share-1", "batch"),
                                        ("GPU-b0", "ml", "share-2", "batch")])).snapshot()
    assert [g.uuid for g in snap.gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]
    assert [n.name for n in snap.nodes] == ["node-a", "node-b"]
    assert snap.gpus[0].model == "H100-SXM" and snap.gpus[2].model == "L40S"
    assert snap.mem_used_mib[0] == pytest.approx(1024) and snap.mem_total_mib[0] == pytest.approx(3072)
    assert snap.sm_clock_mhz[0] == pytest.approx(1980)
    assert snap.sample_age_s[0] == pytest.approx(5)
    assert snap.placements["ml/infer-0"] == (1,)
    assert snap.workload_by_name["ml/infer-0"].workload_class is WorkloadClass.INFERENCE
    assert snap.workload_by_name["ml/share-1"].gpu_milli == 500  # two pods share GPU-b0
    assert snap.services["chat"].demand_rps == 12


@pytest.mark.parametrize(("serving", "replicas"), [
    ({"gputide_inference_demand_rps": "12", "gputide_inference_replicas": "5"}, 5),
    ({"gputide_inference_demand_rps": "12"}, 2),
], ids=["the replicas series when there is one", "else the service's inference pods on GPUs"])
def test_a_service_without_a_replicas_series_counts_its_pods_never_zero(serving, replicas):
    from balancer.model import Workload

    pods = [("GPU-a0", "ml", "chat-0", "inference"), ("GPU-a1", "ml", "chat-1", "inference"),
            ("GPU-b0", "ml", "train-0", "training")]
    owned = {f"ml/{p}": Workload(name=f"ml/{p}", workload_class=WorkloadClass(c), namespace="ml",
                                 owner=p.rsplit("-", 1)[0]) for _, _, p, c in pods}
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                    client=FakeClient(workloads=pods, serving=serving), clock=lambda: NOW,
                                    workload_overrides=lambda: owned)
    assert src.snapshot().services["chat"].replicas == replicas


def test_one_service_name_in_two_namespaces_is_two_services_never_one_overwriting_the_other():
    demand = "gputide_inference_demand_rps"
    serving = [({"__name__": demand, "service": "vllm", "namespace": "team-a"}, "10"),
               ({"__name__": demand, "service": "vllm", "namespace": "team-b"}, "30"),
               ({"__name__": demand, "service": "chat", "namespace": "team-a"}, "5")]
    services = source(FakeClient(serving=serving)).snapshot().services
    assert {k: v.demand_rps for k, v in services.items()} == {"team-a/vllm": 10, "team-b/vllm": 30, "chat": 5}
    # each keeps the namespace its series name: where to scale it while none of its pods runs
    assert {k: v.namespace for k, v in services.items()} == {"team-a/vllm": "team-a", "team-b/vllm": "team-b",
                                                             "chat": "team-a"}


def test_suspended_jobs_come_from_their_provider_and_a_source_without_one_says_it_cannot_see_them():
    from balancer.model import SuspendedJob

    assert source(FakeClient()).snapshot().suspended_jobs is None
    jobs = (SuspendedJob(name="llama-ft", namespace="ml", elastic_max=8),)
    with_jobs = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                          client=FakeClient(), clock=lambda: NOW, suspended_jobs=lambda: jobs)
    assert with_jobs.snapshot().suspended_jobs == jobs


@pytest.mark.parametrize(
    ("client", "error", "message"),
    [
        (FakeClient(values={("GPU-a0", "last_sample"): NOW - 600}), StaleTelemetry, "older than 60s"),
        (FakeClient(values={("GPU-a1", "temperature_c"): math.nan}), InvalidTelemetry, "GPU-a1"),
        (FakeClient(values={("GPU-b0", "power_w"): -5}), InvalidTelemetry, "gpu:power:watts"),
        (FakeClient(values={("GPU-b0", "sm_active"): 3.0}), InvalidTelemetry, "gpu:sm_active:ratio"),
        (FakeClient(drop={("GPU-a0", "power_w")}), MissingTelemetry, "gpu:power:watts missing"),
        (FakeClient(fail=True), TelemetryUnavailable, "did not answer"),
    ],
    ids=["stale-sample", "nan-temperature", "negative-power", "impossible-sm-active", "gpu-missing-a-field",
         "prometheus-down"],
)
def test_bad_telemetry_raises_a_typed_error_never_zeros(client, error, message):
    with pytest.raises(error, match=message):
        source(client).snapshot()


@pytest.mark.parametrize("serving", [
    {"gputide_inference_replicas": "3", "gputide_inference_latency_p99_seconds": "0.2"},
    {"gputide_inference_demand_rps": "NaN", "gputide_inference_replicas": "3"},
], ids=["a-service-without-its-demand", "a-service-with-nan-demand"])
def test_a_service_without_a_finite_demand_is_named_unknown_never_read_as_0(serving):
    """Not refused (the loop's thermal relief goes on): left out of the services, named in `demand_unknown`."""
    snap = source(FakeClient(serving=serving)).snapshot()
    assert "chat" not in snap.services and "gputide_inference_demand_rps absent or NaN" in snap.demand_unknown["chat"]


def test_a_nan_p99_is_no_request_waiting_not_missing_telemetry():
    """histogram_quantile over a window without requests is NaN: the service is there, idle, nothing waited."""
    serving = {"gputide_inference_demand_rps": "0", "gputide_inference_latency_p99_seconds": "NaN",
               "gputide_inference_replicas": "2"}
    chat = source(FakeClient(serving=serving)).snapshot().services["chat"]
    assert (chat.demand_rps, chat.p99_latency_s, chat.replicas) == (0.0, 0.0, 2)


def test_a_p99_beyond_the_highest_bucket_is_pressure_never_calm():
    """histogram_quantile answers +Inf when the quantile is in the +Inf bucket: the slowest a service can be. It was
    dropped as non-finite and read 0, so a stuck service (nothing completes in time) looked calm and lost replicas."""
    serving = {"gputide_inference_demand_rps": "40", "gputide_inference_latency_p99_seconds": "+Inf",
               "gputide_inference_replicas": "2"}
    chat = source(FakeClient(serving=serving)).snapshot().services["chat"]
    assert chat.p99_latency_s == P99_BEYOND_BUCKETS_S and chat.p99_latency_s > 100 * chat.slo_latency_s


def test_optional_fields_fall_back_to_the_catalogue_not_to_zero():
    client = FakeClient(drop={("GPU-a0", "slowdown_temp_c")})
    snap = source(client).snapshot()
    assert snap.slowdown_temp_c[0] == catalog.CATALOGUE["H100-SXM"].slowdown_temp_c == 89.0  # not 0


HEALTHY = {("GPU-a0", "memory_unhealthy"): 0.0, ("GPU-b0", "memory_unhealthy"): 0.0}


@pytest.mark.parametrize(("flags", "expected"), [
    ({}, [False, False, False]),
    ({**HEALTHY, ("GPU-a1", "memory_unhealthy"): 1.0}, [False, True, False]),
    ({("GPU-a0", "memory_unhealthy"): 0.0, ("GPU-a1", "memory_unhealthy"): 1.0, ("GPU-b0", "memory_unhealthy"): 1.0},
     [False, True, True]),
], ids=["no GPU reports memory health (GeForce, ECC off, dcgm-exporter without the fields)",
        "the unhealthy GPU among healthy ones", "every GPU reports it"])
def test_memory_health_flags_only_the_gpus_that_report_it_and_its_absence_is_not_missing_telemetry(flags, expected):
    snap = source(FakeClient(flags=flags)).snapshot()      # never MissingTelemetry: the loop does not hold
    assert [g.uuid for g in snap.gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]
    assert snap.memory_unhealthy.tolist() == expected


@pytest.mark.parametrize(("flags", "stale"), [
    ({("GPU-a1", "readings_frozen"): 1.0}, True),
    ({("GPU-a0", "readings_frozen"): 0.0, ("GPU-a1", "readings_frozen"): 0.0}, False),
    ({("GPU-a1", "readings_frozen"): math.nan}, False),
], ids=["one frozen GPU holds the controller still", "moving counters are fresh", "NaN is not frozen"])
def test_readings_that_stopped_changing_are_stale_whatever_their_timestamps(flags, stale):
    # dcgm-exporter keeps serving its last values, freshly timestamped, after its DCGM host engine restarts
    if stale:
        with pytest.raises(StaleTelemetry, match="on node-a report the same energy reading as 2 minutes ago") as err:
            source(FakeClient(flags=flags)).snapshot()
        assert err.value.subjects == ("GPU-a1",)
    else:
        assert source(FakeClient(flags=flags)).snapshot().n_gpus == 3


@pytest.mark.parametrize("value", [2.0, -1.0, math.inf])
def test_a_memory_health_flag_outside_0_and_1_is_invalid_telemetry(value):
    with pytest.raises(InvalidTelemetry, match="gpu:memory_unhealthy:bool"):
        source(FakeClient(flags={("GPU-b0", "memory_unhealthy"): value})).snapshot()


def test_a_gpu_that_vanishes_between_cycles_is_missing_telemetry():
    client = FakeClient()
    src = source(client)
    src.snapshot()
    GPUS.append(("node-c", "0", "GPU-c0", "Tesla T4"))
    try:
        src.snapshot()
    finally:
        GPUS.pop()
    with pytest.raises(MissingTelemetry, match="vanished") as err:
        src.snapshot()
    assert err.value.subjects == ("GPU-c0",)


def test_a_vanished_gpu_holds_still_for_a_while_then_is_forgotten():
    # a node the autoscaler removed, or one decommissioned: the controller must not hold still until restarted
    clock = [NOW]
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                    client=FakeClient(), clock=lambda: clock[0])
    GPUS.append(("node-c", "0", "GPU-c0", "Tesla T4"))
    try:
        src.snapshot()
    finally:
        GPUS.pop()
    for step in (0, 300, 599):
        clock[0] = NOW + step
        with pytest.raises(MissingTelemetry, match="vanished"):
            src.snapshot()
    clock[0] = NOW + 600
    assert [g.uuid for g in src.snapshot().gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]
    assert [g.uuid for g in src.snapshot().gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]   # and stays forgotten


def test_a_gpu_whose_node_left_the_cluster_is_forgotten_at_once():
    from balancer.model import NodeMeta

    nodes = {"node-a": NodeMeta(labels={}), "node-b": NodeMeta(labels={}), "node-c": NodeMeta(labels={})}
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                    client=FakeClient(), clock=lambda: NOW, node_overrides=lambda: nodes)
    GPUS.append(("node-c", "0", "GPU-c0", "Tesla T4"))
    try:
        src.snapshot()
    finally:
        GPUS.pop()
    with pytest.raises(MissingTelemetry, match="vanished"):   # its node is still there: telemetry was lost
        src.snapshot()
    del nodes["node-c"]
    assert src.snapshot().n_gpus == 3


@pytest.mark.parametrize(("offset", "sampled_ago", "stale"), [
    (+55, 5, False), (-120, 170, True), (0, 70, True)],
    ids=["controller a minute ahead, fresh sample", "controller behind, old sample", "no skew, old sample"])
def test_sample_age_is_read_on_prometheus_clock_not_the_controllers(offset, sampled_ago, stale):
    client = FakeClient(values={(u, "last_sample"): NOW - sampled_ago for _, _, u, _ in GPUS})
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                    client=client, clock=lambda: NOW + offset)
    if stale:
        with pytest.raises(StaleTelemetry, match=f"{sampled_ago}s old"):
            src.snapshot()
    else:
        assert src.snapshot().sample_age_s.tolist() == [sampled_ago] * 3


def test_no_series_at_all_says_what_to_check():
    class Empty(FakeClient):
        def custom_query(self, promql):
            return []

    with pytest.raises(MissingTelemetry, match="recording rules loaded"):
        source(Empty()).snapshot()


def test_staleness_threshold_is_a_multiple_of_the_scrape_interval():
    client = FakeClient(values={("GPU-a0", "last_sample"): NOW - 50})
    assert source(client, stale_after_intervals=4).snapshot().sample_age_s.max() == pytest.approx(50)
    with pytest.raises(StaleTelemetry):
        source(client, stale_after_intervals=3).snapshot()


@pytest.mark.parametrize("fraction", [0.2, 0.7])
def test_demand_history_lines_up_with_what_prometheus_answers_whatever_the_start_fraction(fraction):
    # the real client over a session answering as Prometheus does: at start, start + step, ... from the start it sent
    from prometheus_api_client import PrometheusConnect

    class Answer:
        status_code = 200

        def __init__(self, start, end, step):
            self.data = [{"metric": {}, "values": [[t, "42"] for t in range(start, end + 1, step)]}]

        def json(self):
            return {"status": "success", "data": {"resultType": "matrix", "result": self.data}}

    client = PrometheusConnect(url="http://prom.invalid", disable_ssl=True)
    client._session.request = lambda method, url, params=None, **kw: Answer(
        int(params["start"]), int(params["end"]), int(params["step"].rstrip("s")))
    start = 1_767_000_000 + fraction
    series = source(client).demand_history("sum(x)", start, start + 3600, 300)
    assert series.notna().all() and len(series) == 13 and (series == 42.0).all()


def test_demand_history_keeps_gaps_as_nan():
    class Range(FakeClient):
        def custom_query_range(self, promql, start_time, end_time, step):
            return [{"metric": {}, "values": [[NOW, "1"], [NOW + 120, "3"]]}]

    series = source(Range()).demand_history("sum(x)", NOW, NOW + 180, 60)
    assert list(np.isnan(series.to_numpy())) == [False, True, False, True]
    assert series.iloc[2] == 3


def test_a_new_board_on_a_known_host_stays_with_its_host_and_keeps_its_own_readings():
    """The fleet spec knows node-a's GPU-a0 only; GPU-a1 replaced a board. GPUs stay grouped by host, in line
    with every per-GPU array (a GPU's temperature is its own), and the same fleet twice reuses the topology."""
    from dataclasses import replace

    from balancer import fleet as fleet_mod
    from balancer.model import Node

    fl = fleet_mod.build("t", [Node(name="node-a", gpu_model="H100-SXM", gpu_count=1),
                               Node(name="node-b", gpu_model="L40S", gpu_count=1)])
    fl = fleet_mod.Fleet(name="t", nodes=fl.nodes, gpus=tuple(
        replace(g, uuid={"node-a": "GPU-a0", "node-b": "GPU-b0"}[g.node]) for g in fl.gpus))
    hot = {("GPU-a1", "temperature_c"): 81.0, ("GPU-b0", "temperature_c"): 55.0}
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                    client=FakeClient(values=hot), clock=lambda: NOW, fleet=fl)
    snap = src.snapshot()
    assert [(g.node, g.uuid) for g in snap.gpus] == [("node-a", "GPU-a0"), ("node-a", "GPU-a1"), ("node-b", "GPU-b0")]
    assert dict(zip([g.uuid for g in snap.gpus], snap.temperature_c.tolist(), strict=True)) == {
        "GPU-a0": 60.0, "GPU-a1": 81.0, "GPU-b0": 55.0}
    assert [g.index for g in snap.gpus] == [0, 1, 2]
    again = src.snapshot()
    assert again.gpus is snap.gpus and again.nodes is snap.nodes   # unchanged fleet: last cycle's objects


class TwoClusters(FakeClient):
    """A Prometheus holding the GPUs of two clusters (east and west), answering selectors as Prometheus would."""

    def custom_query(self, promql):
        rows = []
        for cluster in ("east", "west"):
            if f'cluster="{"west" if cluster == "east" else "east"}"' in promql:
                continue   # the other cluster's selector excludes this one
            for r in super().custom_query(promql):
                rows.append({"metric": {**r["metric"], "cluster": cluster}, "value": r["value"]})
        return rows


def test_gpus_of_several_clusters_are_refused_unless_one_is_chosen():
    """A controller pointed at a Prometheus that holds several clusters would otherwise act on all of them."""
    with pytest.raises(InvalidTelemetry, match=r"2 clusters .*\(east, west\): pick this cluster's with --cluster"):
        source(TwoClusters()).snapshot()
    with pytest.raises(InvalidTelemetry, match="--cluster"):
        source(TwoClusters()).gpu_facts()
    snap = source(TwoClusters(), cluster="east").snapshot()
    assert [g.uuid for g in snap.gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]      # east's three GPUs, once each


def test_one_gpu_under_two_hosts_is_refused_not_counted_twice(monkeypatch):
    """A relabelled exporter can leave the old series next to the new for the lookback window: the same UUID on
    two hosts. Before, the snapshot held two GPUs with one UUID, and actions on it could reach either host."""
    monkeypatch.setitem(globals(), "GPUS", [*GPUS, ("node-c", "0", "GPU-b0", "NVIDIA L40S")])   # FakeClient's
    with pytest.raises(InvalidTelemetry, match="1 GPU.* several hostname, gpu or modelName labels: GPU-b0") as err:
        source(FakeClient()).snapshot()
    assert err.value.subjects == ("GPU-b0",)
