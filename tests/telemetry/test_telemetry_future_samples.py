"""Samples stamped in the future (a clock running ahead: an exporter's own timestamps with `honor_timestamps`, a
remote-write or federation agent) hold the controller still (`InvalidTelemetry`) naming the GPUs and how far ahead,
instead of reading as 0 s old: clipped to 0 they read fresh, so the staleness limit never fired (audit a2)."""

from __future__ import annotations

import pytest
from test_telemetry_prometheus_unit import GPUS, NOW, FakeClient, source

from balancer.errors import InvalidTelemetry
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource


def test_a_sample_stamped_minutes_ahead_holds_still_naming_the_gpu_and_how_far():
    with pytest.raises(InvalidTelemetry, match=r"1 GPU\(s\).*300s ahead.*GPU-a0 on node-a") as err:
        source(FakeClient(values={("GPU-a0", "last_sample"): NOW + 300})).snapshot()
    assert err.value.subjects == ("GPU-a0",)


def test_every_gpu_ahead_is_named_and_the_worst_reported():
    client = FakeClient(values={("GPU-a0", "last_sample"): NOW + 60, ("GPU-b0", "last_sample"): NOW + 900})
    with pytest.raises(InvalidTelemetry, match=r"2 GPU\(s\).*900s ahead.*GPU-b0 on node-b") as err:
        source(client).snapshot()
    assert set(err.value.subjects) == {"GPU-a0", "GPU-b0"}


@pytest.mark.parametrize("ahead", [0.001, 5.0, 19.9], ids=["rounding", "a few seconds", "scrape interval + 5 s"])
def test_a_sample_ahead_within_a_scrape_interval_and_5s_reads_fresh(ahead):
    snap = source(FakeClient(values={("GPU-a0", "last_sample"): NOW + ahead})).snapshot()
    assert snap.sample_age_s.tolist() == [0.0, 5.0, 5.0]   # node-a's gpu 0 first: natural order by host, slot


def test_a_gpu_ahead_outside_a_shards_nodes_holds_only_the_shard_that_owns_it():
    src = source(FakeClient(values={("GPU-b0", "last_sample"): NOW + 300}))
    assert src.snapshot_for(lambda name, _node: name == "node-a").n_gpus == len(GPUS)
    with pytest.raises(InvalidTelemetry, match="GPU-b0"):
        src.snapshot_for(lambda name, _node: name == "node-b")


def test_ages_on_the_controllers_clock_are_not_refused_as_ahead():
    """An answer without an evaluation time reads ages on the controller's clock: one 30 s behind Prometheus's made
    every fresh sample look 25 s ahead and held the fleet (audit a13). The check applies only on Prometheus's clock."""

    class NoTime(FakeClient):
        def custom_query(self, q):
            rows = super().custom_query(q)
            for r in rows:
                r["value"] = [None, r["value"][1]]
            return rows

    src = PrometheusTelemetrySource(PrometheusOptions(url="http://x", scrape_interval_s=15), client=NoTime(),
                                    clock=lambda: NOW - 30)
    assert src.snapshot().sample_age_s.tolist() == [0.0, 0.0, 0.0]
