"""`gputide_forecast_demand` reads the window the capacity planner plans on: [now, now + horizon].

It was measured from the forecast's `issued_at`, the start of the bucket before the current one (`forecast.online`),
so it missed the last step of the planner's horizon, and a forecast kept from an earlier cycle showed buckets already
past (auditor s35s2)."""

from __future__ import annotations

import numpy as np
from prometheus_client import CollectorRegistry

from balancer.fleet_record import FleetRecorder
from balancer.metrics import ControllerMetrics
from balancer.model import Forecast
from balancer.plan.capacity_plan import forecast_peak

STEP = 600.0
B = 1000   # the current bucket


def _gauge(fc: Forecast, now: float, horizon_s: float = 3600.0) -> float | None:
    registry = CollectorRegistry()
    FleetRecorder(ControllerMetrics(registry))._forecast_series({"chat": fc}, None, horizon_s, now)
    return registry.get_sample_value("gputide_forecast_demand", {"service": "chat", "quantile": "0.9",
                                                                 "horizon": "1h"})


def _forecast(issued_bucket: int, peak_bucket: int, peak: float = 95.0) -> Forecast:
    """A p90 of 10 req/s with `peak` in `peak_bucket`; index i holds the bucket issued_bucket + 1 + i."""
    p90 = np.full(48, 10.0)
    p90[peak_bucket - issued_bucket - 1] = peak
    return Forecast(service="chat", issued_at=issued_bucket * STEP, step_s=STEP, quantiles={0.9: p90})


def test_the_gauge_reaches_the_last_step_of_the_planners_horizon():
    now = B * STEP + 300   # mid-bucket, the forecast issued at the start of the bucket before
    fc = _forecast(B - 1, B + 6)
    assert forecast_peak(fc, 0.9, now, 3600.0) == 95.0   # what the planner plans on
    assert _gauge(fc, now) == 95.0   # was 10: the window ended a step short


def test_a_forecast_kept_from_an_earlier_cycle_shows_no_bucket_already_past():
    now = B * STEP + 300
    fc = _forecast(B - 4, B - 1)   # kept three steps: its peak lies in a bucket gone by
    assert forecast_peak(fc, 0.9, now, 3600.0) == 10.0
    assert _gauge(fc, now) == 10.0   # was 95


def test_the_gauge_is_the_planners_peak_wherever_now_falls():
    for issued in (B - 3, B - 1, B):
        for peak in range(issued + 1, issued + 12):
            fc = _forecast(issued, peak)
            for now in (B * STEP, B * STEP + 1, B * STEP + 300, (B + 1) * STEP - 1):
                assert _gauge(fc, now) == forecast_peak(fc, 0.9, now, 3600.0), (issued, peak, now)
