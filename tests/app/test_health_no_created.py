"""The controller's and the scheduler's /metrics carry no `_created` series: prometheus-client adds one per counter
and histogram series (its creation time), 127 of the controller's 289 samples, which nothing reads and which the
exporter and the power-cap agent already leave out."""

from __future__ import annotations

import urllib.request

import prometheus_client
import pytest

from balancer.app.health import Health, serve
from balancer.metrics import ControllerMetrics


@pytest.fixture
def created_restored():
    yield
    prometheus_client.enable_created_metrics()   # process-wide: the other tests' registries keep the default


def test_served_metrics_have_no_created_series(created_restored):
    metrics = ControllerMetrics(prometheus_client.CollectorRegistry())
    server = serve(0, metrics.registry, Health(60.0), addr="127.0.0.1")
    try:
        text = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10).read().decode()
    finally:
        server.close()
    assert "gputide_reconcile_duration_seconds_bucket" in text   # a histogram is served ...
    assert "_created" not in text                                # ... without its creation time
