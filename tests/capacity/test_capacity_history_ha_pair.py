"""The forecaster's demand history and the live reading agree on a service whose demand series is duplicated.

An HA Prometheus pair read without deduplication (through Thanos or federation, the copies differing only by a
`prometheus_replica` label), or two scrape jobs of one exporter, gives one service's `gputide_inference_demand_rps`
twice. The live reading takes the higher copy (`serving.read_services`); the default history query summed them,
so the forecaster learnt twice the traffic the controller then observed and sized the service's capacity from it.
"""

from __future__ import annotations

import time

import pytest

from balancer.app.capacity_run import PrometheusDemandHistory
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target

pytestmark = pytest.mark.integration


def test_history_reads_an_ha_pairs_duplicated_demand_as_the_live_reading_does(prometheus_factory, metrics_server):
    exporter = metrics_server('gputide_inference_demand_rps{service="chat"} 12\n'
                              'gputide_inference_demand_rps{service="mail"} 3\n')
    prom = prometheus_factory([Target("serving", exporter.address, {"prometheus_replica": r}) for r in ("a", "b")])
    prom.wait_for('count(gputide_inference_demand_rps{service="chat"}) == 2', bool, timeout=30)
    time.sleep(3)   # a few scrapes of both copies
    source = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0))
    live = source._services()[0]   # what each cycle reads (statuses; then the unknown demands)
    history = PrometheusDemandHistory(source, days=1.0, step_s=1.0)
    now = time.time()
    for service in ("chat", "mail"):
        past = history(service, now)
        assert past is not None and past.notna().sum() >= 2
        assert set(past.dropna()) == {live[service].demand_rps}, service
