"""The controller's registry serves `process_start_time_seconds`: GputideKueueQuotaUntold joins on it to count a
counter born in a process started within the hour (audit a10)."""

from __future__ import annotations

import sys
import time

import pytest
from prometheus_client import CollectorRegistry

from balancer.metrics import ControllerMetrics


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="ProcessCollector reads /proc")
def test_controller_registry_serves_process_start_time_seconds():
    registry = CollectorRegistry()
    ControllerMetrics(registry)
    started = registry.get_sample_value("process_start_time_seconds")
    assert started is not None
    assert 0 < started <= time.time()
