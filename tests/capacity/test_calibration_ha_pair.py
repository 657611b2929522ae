"""`gputide calibrate` reads a service's duplicated series as the controller's live reading does.

An HA Prometheus pair read without deduplication (copies differing only by `prometheus_replica`), or two scrape
jobs of one exporter, gives a service's serving series twice. The controller reads the higher copy
(`serving.read_services`); calibrate summed demand and replicas, so a duplicated demand series (a gateway scraped
by two jobs) beside a single replica count doubled the requests per replica it suggested for the profile.
"""

from __future__ import annotations

import argparse
import time

import pytest

from balancer.cmd.calibrate import DEMAND_QUERY, LATENCY_QUERY, REPLICAS_QUERY, from_prometheus
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target

pytestmark = pytest.mark.integration


def test_calibrate_reads_duplicated_series_once_as_the_live_reading_does(prometheus_factory, metrics_server):
    serving = metrics_server('gputide_inference_demand_rps{service="chat"} 12\n'
                             'gputide_inference_replicas_ready{service="chat"} 3\n'
                             'gputide_inference_latency_p99_seconds{service="chat"} 0.2\n')
    prom = prometheus_factory([Target("serving", serving.address, {"prometheus_replica": r}) for r in ("a", "b")])
    prom.wait_for('count(gputide_inference_replicas_ready{service="chat"}) == 2', bool, timeout=30)
    time.sleep(3)   # a few scrapes of both copies
    source = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0))
    live = source._services()[0]["chat"]   # (statuses, unknown demands)
    args = argparse.Namespace(demand_query=DEMAND_QUERY, replicas_query=REPLICAS_QUERY, latency_query=LATENCY_QUERY,
                              cluster=None)
    now = time.time()
    frame = from_prometheus(source, args, "chat", now - 60, now, 1.0).dropna()
    assert len(frame) >= 2
    assert set(frame["demand"]) == {live.demand_rps} == {12.0}
    assert set(frame["replicas"]) == {3.0}
    assert set(frame["demand"] / frame["replicas"]) == {4.0}   # what the fit sees: 4 req/s per replica, not 8
