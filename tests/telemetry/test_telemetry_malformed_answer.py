"""A 200 answer without the data an instant or range query returns (a proxy or gateway in front of Prometheus
answering JSON of its own) is Prometheus not answering: `TelemetryUnavailable`, so the loop holds still *and says
so* (gputide_fail_static 1, reason telemetry_unavailable), never a KeyError that ends the cycle as an "error" while
the fail-static gauge reads 0."""

from __future__ import annotations

import pytest
from prometheus_api_client import PrometheusConnect

from balancer.errors import TelemetryUnavailable
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

NOW = 1_700_000_000.0


class Answer:
    status_code = 200

    def __init__(self, body):
        self.body = body

    def json(self):
        return self.body


@pytest.mark.parametrize("body", [{"status": "success"}, {"status": "success", "data": None}, ["not", "an", "object"]],
                         ids=["no data", "data null", "a JSON list"])
def test_an_answer_without_data_is_telemetry_unavailable(body):
    client = PrometheusConnect(url="http://prom.invalid", disable_ssl=True)
    client._session.request = lambda method, url, params=None, **kw: Answer(body)
    src = PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid"), client=client, clock=lambda: NOW)
    with pytest.raises(TelemetryUnavailable, match="did not answer"):
        src.snapshot()
    with pytest.raises(TelemetryUnavailable, match="failed"):
        src.demand_history("sum(x)", NOW - 600, NOW, 60)
