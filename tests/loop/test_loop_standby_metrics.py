"""What a controller replica that stopped leading still reports of its term as leader (`ControllerMetrics.standby`)."""

from __future__ import annotations

import math
from types import SimpleNamespace

from prometheus_client import CollectorRegistry

from balancer.metrics import ControllerMetrics


def test_a_demoted_replica_no_longer_counts_gpus_of_unknown_health():
    metrics = ControllerMetrics(CollectorRegistry())
    metrics.set_reading(None, SimpleNamespace(health_unknown={"GPU-a", "GPU-b"}), held=False)
    assert metrics.registry.get_sample_value("gputide_gpus_health_unknown") == 2
    metrics.standby()   # it reads no telemetry any more: it cannot tell, as during a hold
    assert math.isnan(metrics.registry.get_sample_value("gputide_gpus_health_unknown"))
