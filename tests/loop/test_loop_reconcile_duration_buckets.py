"""`gputide_reconcile_duration_seconds`: its buckets tell a cycle that acted for minutes from one of 10 s."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from balancer.cmd.run import MOST_ACTION_DEADLINE_S
from balancer.metrics import ControllerMetrics


def test_cycles_that_act_for_minutes_land_in_buckets_of_their_own():
    metrics = ControllerMetrics(CollectorRegistry())
    for seconds in (0.3, 20.0, 150.0, MOST_ACTION_DEADLINE_S):   # planning only; one quick action; slow ones
        metrics.reconcile_duration.observe(seconds)

    def under(le: str) -> float:
        return metrics.registry.get_sample_value("gputide_reconcile_duration_seconds_bucket", {"le": le})

    assert [under(le) for le in ("0.5", "10.0", "30.0", "300.0", "600.0", "+Inf")] == [1, 1, 2, 3, 4, 4]
