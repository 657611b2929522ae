"""Serving series repeated for one service (an HA Prometheus pair read without deduplication, two scrape jobs of one
vLLM): the reading that asks most of the service's capacity is taken, whatever order the answer lists them in."""

from __future__ import annotations

import pytest

from balancer.telemetry.serving import read_services


def _row(name: str, value: str, replica: str) -> dict:
    return {"metric": {"__name__": name, "service": "chat", "namespace": "ml", "prometheus_replica": replica},
            "value": [0, value]}


@pytest.mark.parametrize("order", [1, -1], ids=["high first", "low first"])
def test_duplicate_serving_series_take_the_higher_reading_in_any_order(order):
    rows = [_row("gputide_inference_demand_rps", "100", "a"), _row("gputide_inference_demand_rps", "10", "b"),
            _row("gputide_inference_latency_p99_seconds", "2.5", "a"),
            _row("gputide_inference_latency_p99_seconds", "0.1", "b"),
            _row("gputide_inference_replicas", "6", "a"), _row("gputide_inference_replicas", "4", "b")][::order]
    status = read_services(rows, (), {}, 0.5)[0]["chat"]
    assert status.demand_rps == 100   # 10 would look idle: the capacity planner lends its GPUs away
    assert status.p99_latency_s == 2.5
    assert status.replicas == 6
