"""A demand-history range query answered with something other than float series: native histogram samples (a
custom ``--demand-query`` over a native histogram: Prometheus answers such a series with ``histograms``, no
``values``) or a malformed series from a proxy. `demand_history` parsed the answer outside its `try`, so this was a
plain KeyError; only `GputideError` is caught above it (`PrometheusDemandHistory`, `HistorySeeds`), so the
forecaster's call ended every reconcile cycle with an error, thermal relief included. Now it is `InvalidTelemetry`
naming the query and what was wrong: the service goes unseeded and is asked again, the cycle goes on."""

from __future__ import annotations

import pytest
from prometheus_api_client import PrometheusConnect
from test_telemetry_malformed_answer import Answer

from balancer.app.capacity_run import PrometheusDemandHistory
from balancer.errors import InvalidTelemetry
from balancer.forecast.service import HistorySeeds
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

NOW = 1_700_000_000.0
QUERY = "sum(rate(http_request_duration_seconds{service=\"chat\"}[5m]))"
# what Prometheus (native histograms on) answers for a range query over a native histogram
HISTOGRAM = {"metric": {"service": "chat"},
             "histograms": [[NOW - 60, {"count": "3", "sum": "1.5", "buckets": [[0, "0.5", "1", "3"]]}]]}


def source(result) -> PrometheusTelemetrySource:
    """A source whose real PrometheusConnect gets `result` as a successful range query's `data.result`."""
    client = PrometheusConnect(url="http://prom.invalid", disable_ssl=True)
    body = {"status": "success", "data": {"resultType": "matrix", "result": result}}
    client._session.request = lambda method, url, params=None, **kw: Answer(body)
    return PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid"), client=client, clock=lambda: NOW)


@pytest.mark.parametrize(("result", "why"), [
    ([HISTOGRAM], "native histogram"),
    ([{"metric": {}, "values": [[NOW - 60, "1"]]}, HISTOGRAM], "native histogram"),
    ([{"metric": {"service": "chat"}}], "not \\[time, value\\] pairs"),
    ([{"metric": {}, "values": [[NOW - 60, "1", "2"]]}], "not \\[time, value\\] pairs"),
    ([{"metric": {}, "values": [[NOW - 60, "many"]]}], "not \\[time, value\\] pairs"),
    (["chat"], "not \\[time, value\\] pairs"),
    ({"chat": [1]}, "not a range vector"),
], ids=["a native histogram series", "a float series beside a histogram one", "a series without values",
        "a sample of three items", "a value not a number", "a series not an object", "a result not a list"])
def test_an_answer_not_float_series_is_invalid_telemetry_naming_the_query(result, why):
    with pytest.raises(InvalidTelemetry, match=why) as raised:
        source(result).demand_history(QUERY, NOW - 3600, NOW, 60)
    assert QUERY in str(raised.value)


def test_a_native_histogram_history_leaves_the_service_unseeded_and_the_cycle_going():
    seeds = HistorySeeds(PrometheusDemandHistory(source([HISTOGRAM]), query=QUERY))
    assert seeds.take(["chat"], NOW) == {}   # raised KeyError through here, out of the reconcile cycle
    assert "chat" in seeds.waiting and "chat" not in seeds.seeded


def test_float_series_still_read_as_before():
    got = source([{"metric": {}, "values": [[NOW - 120, "4"], [NOW - 60, "5"]]}]).demand_history(
        QUERY, NOW - 120, NOW, 60)
    assert got.tolist()[:2] == [4.0, 5.0]
