"""Telemetry gaps the Prometheus source must not read as good news: a GPU whose health series are missing while the
fleet publishes them is of unknown health (kept from new work), never healthy; a GPU gone from telemetry while its
node is still a Kubernetes node holds the controller still, never forgotten; a refused reading keeps the age it
measured for the staleness gauge."""

from __future__ import annotations

import logging
import math

import pytest
from test_telemetry_prometheus_unit import GPUS, NOW, FakeClient, source

from balancer.errors import MissingTelemetry, StaleTelemetry, TelemetryUnavailable
from balancer.model import NodeMeta
from balancer.telemetry.gpu_frame import UNSUPPORTED_INFO
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

MEMORY_FIELDS = ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "DCGM_FI_DEV_ROW_REMAP_PENDING", "DCGM_FI_DEV_ROW_REMAP_FAILURE")


class Declaring(FakeClient):
    """FakeClient whose exporter declares the (UUID, field) pairs of `declared` unsupported."""

    def __init__(self, declared=(), **kw):
        super().__init__(**kw)
        self.declared = declared

    def custom_query(self, promql):
        if promql.startswith(UNSUPPORTED_INFO):
            return [{"metric": {"__name__": UNSUPPORTED_INFO, "UUID": u, "field": f}, "value": [NOW, "1"]}
                    for u, f in self.declared]
        return super().custom_query(promql)


def flags(**values):
    return {(uuid, "memory_unhealthy"): v for uuid, v in values.items()}


@pytest.mark.parametrize(("client", "unknown"), [
    (Declaring(flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0})), {"GPU-a1"}),
    (Declaring(flags=flags(**{"GPU-a0": 0.0, "GPU-a1": math.nan, "GPU-b0": 0.0})), {"GPU-a1"}),
    (Declaring(drop=[("GPU-b0", "xid")]), {"GPU-b0"}),
    (Declaring(drop=[("GPU-b0", "xid")], flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0})), {"GPU-a1", "GPU-b0"}),
    (Declaring(flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0}), declared=[("GPU-a1", MEMORY_FIELDS[0])]), {"GPU-a1"}),
], ids=["memory health missing on one GPU", "memory health NaN on one GPU", "XID missing on one GPU",
        "both, on two GPUs", "only ECC declared unsupported: its remapper could still report"])
def test_a_gpu_without_the_health_series_the_fleet_publishes_is_of_unknown_health_and_kept_from_new_work(
        client, unknown, caplog):
    src = source(client)
    with caplog.at_level(logging.WARNING, logger="balancer.telemetry.prometheus"):
        snap = src.snapshot()   # not missing telemetry: the controller goes on, without that GPU as a target
    assert src.health_unknown == unknown
    assert {g.uuid for g in snap.gpus if snap.memory_unhealthy[g.index]} == unknown
    assert sum("health unknown" in r.getMessage() for r in caplog.records) == 1
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="balancer.telemetry.prometheus"):
        src.snapshot()
    assert not [r for r in caplog.records if "health unknown" in r.getMessage()]   # logged once, while it lasts


@pytest.mark.parametrize("client", [
    Declaring(drop=[(u, "xid") for _, _, u, _ in GPUS]),
    Declaring(flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0}), declared=[("GPU-a1", f) for f in MEMORY_FIELDS]),
    Declaring(drop=[("GPU-b0", "xid")], declared=[("GPU-b0", "DCGM_FI_DEV_XID_ERRORS")]),
], ids=["no GPU publishes XIDs or memory health (an exporter without those fields)",
        "its exporter declares memory health unsupported (no ECC, no row remapper)",
        "its exporter declares XID events unsupported (NVML delivers none for that board)"])
def test_health_series_no_gpu_has_or_a_board_never_has_read_healthy(client):
    src = source(client)
    snap = src.snapshot()
    assert src.health_unknown == frozenset() and not snap.memory_unhealthy.any()


def test_a_gpu_back_with_its_health_series_is_healthy_again():
    client = Declaring(flags=flags(**{"GPU-a0": 0.0, "GPU-b0": 0.0}))
    src = source(client)
    assert src.snapshot().memory_unhealthy.tolist() == [False, True, False]
    client.flags[("GPU-a1", "memory_unhealthy")] = 0.0
    assert src.snapshot().memory_unhealthy.tolist() == [False, False, False]
    assert src.health_unknown == frozenset()


def test_a_vanished_gpu_whose_node_is_still_in_kubernetes_holds_still_for_a_while_then_is_forgotten_loudly(caplog):
    """One node whose exporter is down (crash-looping, its driver gone) must not stop the controller for the whole
    fleet until someone deletes the node: it holds still `forget_vanished_after_s`, then the GPU leaves the plan
    (no action on or towards it) with a warning that says its node is still there."""
    clock = [NOW]
    nodes = {"node-a": NodeMeta(labels={}), "node-b": NodeMeta(labels={}), "node-c": NodeMeta(labels={})}
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                    client=FakeClient(), clock=lambda: clock[0], node_overrides=lambda: nodes)
    GPUS.append(("node-c", "0", "GPU-c0", "Tesla T4"))
    try:
        src.snapshot()
    finally:
        GPUS.pop()
    with caplog.at_level(logging.WARNING, logger="balancer.telemetry.prometheus"):
        for step in (0, 300, 599):
            clock[0] = NOW + step
            with pytest.raises(MissingTelemetry, match="vanished") as err:
                src.snapshot()
            assert err.value.subjects == ("GPU-c0",)
        clock[0] = NOW + 600
        assert [g.uuid for g in src.snapshot().gpus] == ["GPU-a0", "GPU-a1", "GPU-b0"]
    warned = [r.getMessage() for r in caplog.records if "GPU-c0" in r.getMessage()]
    assert len(warned) == 1 and "its node still in Kubernetes" in warned[0], warned


def test_a_refused_reading_keeps_the_age_it_measured_for_the_staleness_gauge():
    src = source(FakeClient(values={("GPU-a0", "last_sample"): NOW - 600}))
    with pytest.raises(StaleTelemetry):
        src.snapshot()
    assert src.oldest_sample_age_s == 600
    src.client = FakeClient(fail=True)
    with pytest.raises(TelemetryUnavailable):
        src.snapshot()
    assert math.isnan(src.oldest_sample_age_s)   # measured nothing: unknown, not the last reading's age


def test_a_shard_reports_the_gpus_of_unknown_health_on_its_own_nodes_and_the_age_its_source_measured():
    from balancer.telemetry.shard import ShardedSource, ShardSelector

    inner = source(Declaring(drop=[("GPU-b0", "xid"), ("GPU-a1", "xid")]))
    on_b, on_a = (ShardedSource(inner, ShardSelector(n, nodes=frozenset({n}))) for n in ("node-b", "node-a"))
    on_b.snapshot()
    on_a.snapshot()
    assert (on_b.health_unknown, on_a.health_unknown) == ({"GPU-b0"}, {"GPU-a1"})
    assert on_b.oldest_sample_age_s == 5.0
