"""The GPU query's shape: the numeric fields come keyed by `__name__` and `UUID` alone, one series per GPU (last
sample) brings its labels, all in one instant query. Unit cases against a fake that answers as Prometheus does,
and the real Prometheus (shipped rules over the simulated exporter) answering the same values as the full-label
query it replaces."""

from __future__ import annotations

import numpy as np
import pytest

from balancer import fleet as fleet_mod
from balancer.errors import InvalidTelemetry, MissingTelemetry
from balancer.sim import SimCluster, default_mix
from balancer.telemetry.prometheus import FIELDS, IDENTITY, PrometheusOptions, PrometheusTelemetrySource

NOW = 1_700_000_000.0
IDENTITY_RULE = FIELDS[IDENTITY][0]
GPUS = [("node-a", "0", "GPU-a0", "NVIDIA H100 80GB HBM3", "c1"), ("node-a", "1", "GPU-a1", "NVIDIA H100 80GB HBM3", "c1"),
        ("node-b", "0", "GPU-b0", "NVIDIA L40S", "c1")]
VALUES = {"temperature_c": 60.0, "power_w": 300.0, "power_limit_w": 700.0, "sm_active": 0.5,
          "mem_used_mib": 2.0**30, "mem_free_mib": 2.0**31, "last_sample": NOW - 5}


class SlimPrometheus:
    """Answers the GPU query as Prometheus does: every numeric series with `__name__` and `UUID` only (max over
    series of one UUID), the identity series with all their labels. `gpus` rows: hostname, gpu, UUID, modelName,
    cluster; `values[(uuid, field)]` overrides; `extra` adds raw (labels, value) rows."""

    def __init__(self, gpus=GPUS, values=None, extra=()):
        self.gpus, self.values, self.extra = gpus, values or {}, list(extra)
        self.queries: list[str] = []

    def custom_query(self, promql):
        self.queries.append(promql)
        if "workload_info" in promql or "inference" in promql:
            return []
        rows = [({"__name__": IDENTITY_RULE, "hostname": h, "gpu": g, "UUID": u, "modelName": m, "cluster": c},
                 self.values.get((u, IDENTITY), VALUES[IDENTITY])) for h, g, u, m, c in self.gpus
                if f'cluster="{c}"' in promql or "cluster=" not in promql]
        picked = {r[0]["UUID"] for r in rows}
        rows += [({"__name__": FIELDS[f][0], "UUID": u}, self.values.get((u, f), v))
                 for u in dict.fromkeys(picked) for f, v in VALUES.items() if f != IDENTITY]
        return [{"metric": m, "value": [NOW, str(v)]} for m, v in rows + self.extra]


def source(client, **opts):
    return PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15, **opts),
                                     client=client, clock=lambda: NOW)


def test_one_query_reads_every_gpu_field_at_one_instant_and_the_labels_once_per_gpu():
    client = SlimPrometheus()
    snap = source(client).snapshot()
    gpu_queries = [q for q in client.queries if "workload_info" not in q and "inference" not in q]
    assert len(gpu_queries) == 1 and gpu_queries[0].startswith("max by (__name__, UUID) (")
    assert gpu_queries[0].endswith(f" or {IDENTITY_RULE}{{}}")
    assert [(g.node, g.slot, g.uuid, g.model) for g in snap.gpus] == [
        ("node-a", 0, "GPU-a0", "H100-SXM"), ("node-a", 1, "GPU-a1", "H100-SXM"), ("node-b", 0, "GPU-b0", "L40S")]
    assert snap.temperature_c.tolist() == [60.0] * 3 and snap.mem_total_mib.tolist() == [3072.0] * 3
    assert snap.sample_age_s.tolist() == [5.0] * 3


def test_a_chosen_cluster_restricts_both_halves_of_the_query():
    gpus = [*GPUS, ("node-w", "0", "GPU-w0", "NVIDIA L40S", "west")]
    with pytest.raises(InvalidTelemetry, match=r"2 clusters .*\(c1, west\)"):
        source(SlimPrometheus(gpus)).snapshot()
    client = SlimPrometheus(gpus)
    snap = source(client, cluster="west").snapshot()
    assert [g.uuid for g in snap.gpus] == ["GPU-w0"]
    assert client.queries[0].count('cluster="west"') == 2


@pytest.mark.parametrize(("client", "error", "message", "subjects"), [
    (SlimPrometheus(values={("GPU-a1", "power_w"): float("nan")}), InvalidTelemetry,
     r"NaN in gpu:power:watts on GPU-a1 \(node-a\)", ("GPU-a1",)),
    (SlimPrometheus(extra=[({"__name__": "gpu:power:watts", "UUID": "GPU-x9"}, 1.0)]), MissingTelemetry,
     "gpu:last_sample:timestamp_seconds missing for 1 GPU", ("GPU-x9",)),
    (SlimPrometheus(extra=[({"__name__": IDENTITY_RULE, "hostname": "node-z", "gpu": "3", "UUID": "GPU-b0",
                             "modelName": "NVIDIA L40S", "cluster": "c1"}, NOW - 5)]), InvalidTelemetry,
     "1 GPU.* under several hostname, gpu or modelName labels .*GPU-b0", ("GPU-b0",)),
    (SlimPrometheus(extra=[({"__name__": IDENTITY_RULE, "gpu": "3", "UUID": "GPU-c0"}, NOW - 5)]), InvalidTelemetry,
     "lacks a known rule name or the labels hostname", None),
], ids=["a NaN in a series without the GPU's labels names the GPU and its host",
        "a field of a GPU without its labelled series names the GPU",
        "one UUID on two hosts is refused: its readings could be either's",
        "the labelled series without a hostname is refused"])
def test_broken_slim_answers_fail_static_naming_the_gpus(client, error, message, subjects):
    with pytest.raises(error, match=message) as err:
        source(client).snapshot()
    if subjects is not None:
        assert err.value.subjects == subjects


def test_a_gpu_scraped_twice_is_one_gpu():
    twice = SlimPrometheus(extra=[({"__name__": IDENTITY_RULE, "hostname": "node-b", "gpu": "0", "UUID": "GPU-b0",
                                    "modelName": "NVIDIA L40S", "cluster": "c1"}, NOW - 2)])
    snap = source(twice).snapshot()
    assert [g.uuid for g in snap.gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]
    assert snap.sample_age_s.tolist() == [5.0, 5.0, 2.0]   # the newer of the two samples


# ---- the real Prometheus -------------------------------------------------------------------------------------------
FLEET = {"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "slim"}, "spec": {"nodeGroups": [
    {"namePrefix": "h100-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 4},
    {"namePrefix": "a100-", "count": 1, "gpuModel": "A100-SXM4-80GB", "gpusPerNode": 4}]}}


@pytest.fixture(scope="module")
def two_clusters(module_prometheus_factory):
    """h100-00 scraped as cluster east, a100-00 as west, each by its own simulated exporter."""
    from balancer.telemetry.promserver import Target, default_rule_files
    from exporters.backends.sim import SimBackend
    from exporters.collector import GpuCollector
    from exporters.server import serve

    sim = SimCluster(fleet_mod.from_dict(FLEET, "<slim>"), seed=5, step_s=60.0)
    default_mix(sim)
    for _ in range(10):
        sim.step()
    exporters = {c: serve(GpuCollector(SimBackend(sim, node=n)), port=0)
                 for c, n in (("east", "h100-00"), ("west", "a100-00"))}
    prom = module_prometheus_factory(
        [Target("gputide-exporter", f"127.0.0.1:{e.port}", {"cluster": c}) for c, e in exporters.items()],
        rule_files=default_rule_files())
    for rule, _ in FIELDS.values():
        prom.wait_for(f"count({rule})", lambda r: bool(r) and float(r[0]["value"][1]) == 8, timeout=30)
    yield prom
    for e in exporters.values():
        e.close()


@pytest.mark.integration
def test_real_prometheus_answers_the_slim_query_with_the_values_of_the_full_one(two_clusters):
    prom = two_clusters
    src = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0, cluster="east"))
    answer = prom.query(src._gpu_query())
    assert len({r["value"][0] for r in answer}) == 1                      # one evaluation instant
    labelled = [r["metric"] for r in answer if r["metric"]["__name__"] == IDENTITY_RULE]
    assert {m["hostname"] for m in labelled} == {"h100-00"} and len(labelled) == 4
    assert {frozenset(r["metric"]) for r in answer if r["metric"]["__name__"] != IDENTITY_RULE} == {
        frozenset({"__name__", "UUID"})}
    at = answer[0]["value"][0]
    full = prom.query('{__name__=~"' + "|".join(r for r, _ in FIELDS.values()) + '",cluster="east"}', at=at)
    as_full = {(r["metric"]["UUID"], r["metric"]["__name__"]): float(r["value"][1]) for r in full}
    as_slim = {(r["metric"]["UUID"], r["metric"]["__name__"]): float(r["value"][1]) for r in answer}
    assert as_slim == as_full and len(as_slim) == 4 * len(FIELDS)
    snap = src.snapshot()
    assert [g.node for g in snap.gpus] == ["h100-00"] * 4 and np.isfinite(snap.temperature_c).all()


@pytest.mark.integration
def test_real_prometheus_with_two_clusters_and_none_chosen_is_refused(two_clusters):
    src = PrometheusTelemetrySource(PrometheusOptions(url=two_clusters.url, scrape_interval_s=1.0))
    with pytest.raises(InvalidTelemetry, match=r"2 clusters .*\(east, west\)"):
        src.snapshot()
