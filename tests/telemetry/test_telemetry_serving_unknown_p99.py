"""A service with demand and no p99 (its latency series absent, or NaN) has an unknown latency, never 0.

histogram_quantile is NaN over a window without requests, and the source dropped NaN as absent and read 0. While the
service is idle that is right (no request waited), but with requests arriving a lost latency series (a scrape down,
a renamed vLLM histogram) read as a perfect 0 s: co-location counted slack and gave training its GPUs back, and
never shrank for the service. With demand the p99 is now NaN (`LATENCY_UNKNOWN`): no latency evidence either way.
"""

from __future__ import annotations

import math

import pytest

from balancer.telemetry.serving import read_services


def _rows(**series: str) -> list[dict]:
    return [{"metric": {"__name__": f"gputide_inference_{k}", "service": "chat"}, "value": [0, v]}
            for k, v in series.items()]


def _p99(**series: str) -> float:
    return read_services(_rows(**series), (), {}, 0.5)[0]["chat"].p99_latency_s


@pytest.mark.parametrize("series", [
    {"demand_rps": "50", "replicas": "2"},
    {"demand_rps": "50", "replicas": "2", "latency_p99_seconds": "NaN"},
], ids=["p99-series-absent", "p99-nan"])
def test_demand_without_a_p99_is_unknown_latency_never_zero(series):
    assert math.isnan(_p99(**series))


@pytest.mark.parametrize("series", [
    {"demand_rps": "0", "replicas": "2"},
    {"demand_rps": "0", "replicas": "2", "latency_p99_seconds": "NaN"},
], ids=["idle-p99-absent", "idle-p99-nan"])
def test_an_idle_service_without_a_p99_reads_zero_no_request_waited(series):
    assert _p99(**series) == 0.0


def test_a_p99_read_is_kept_whatever_the_demand():
    assert _p99(demand_rps="50", latency_p99_seconds="0.2") == 0.2
    assert _p99(demand_rps="0", latency_p99_seconds="0.2") == 0.2


def test_one_nan_p99_of_a_pair_takes_the_other():
    rows = _rows(demand_rps="50") + [
        {"metric": {"__name__": "gputide_inference_latency_p99_seconds", "service": "chat", "replica": r},
         "value": [0, v]} for r, v in (("a", "NaN"), ("b", "0.3"))]
    assert read_services(rows, (), {}, 0.5)[0]["chat"].p99_latency_s == 0.3
