"""A demand history query answered with several series (an HA Prometheus pair read without deduplication, a query
template that does not aggregate): every series counts, the higher reading at each step, never the first listed."""

from __future__ import annotations

import pytest

from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

NOW = 1_700_000_000.0


class Range:
    def __init__(self, order):
        self.order = order

    def custom_query_range(self, promql, start_time, end_time, step):
        low = {"metric": {"prometheus_replica": "b"}, "values": [[NOW, "10"], [NOW + 60, "12"], [NOW + 120, "11"]]}
        high = {"metric": {"prometheus_replica": "a"}, "values": [[NOW, "100"], [NOW + 120, "90"]]}
        return [low, high][::self.order]


@pytest.mark.parametrize("order", [1, -1], ids=["low first", "high first"])
def test_demand_history_of_several_series_takes_the_higher_at_each_step(order):
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid"), client=Range(order),
                                    clock=lambda: NOW)
    series = src.demand_history("gputide_inference_demand_rps", NOW, NOW + 180, 60)
    # the forecaster sizes the service's capacity from this: a tenth of its traffic would shed its replicas
    assert series.iloc[:3].tolist() == [100.0, 12.0, 90.0]
    assert series.isna().iloc[3]
