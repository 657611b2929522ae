"""A forecast is never built on demand that stopped hours ago and served as fresh. While the loop holds still
(missing telemetry) it feeds the forecaster nothing; on the first cycle after, the history ended hours before and a
forecast issued then was that old picture with one-step-ahead widths (p50 98 against a real 157). None is given until
fresh buckets arrive (the capacity planner holds the service meanwhile), nor a kept forecast older than one may be
issued."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster
from balancer.model import ServiceStatus
from tests.loop.loop_helpers import make_fleet, snapshot

STEP = 300.0


def fed(until: float) -> DemandForecaster:
    online = DemandForecaster(model="persistence", step_s=STEP, min_history=3)
    for t in np.arange(0.0, until, STEP):
        online.update("chat", float(t), 100.0 + t / 3600.0)
    return online


def test_after_a_gap_of_hours_there_is_no_forecast_until_fresh_buckets_arrive():
    online = fed(6 * 3600.0)
    assert online.forecast("chat", 6 * 3600.0, 4).quantiles[0.5][0] > 0   # no gap: a forecast
    later = 6 * 3600.0 + 8 * 3600.0   # 8 h with nothing fed
    online.update("chat", later, 157.0)
    with pytest.raises(ValueError, match="last seen"):
        online.forecast("chat", later, 4)
    online.update("chat", later + STEP, 157.0)   # the bucket after the gap closes: fresh demand again
    assert np.isfinite(online.forecast("chat", later + STEP, 4).quantiles[0.5]).all()


def test_a_kept_forecast_older_than_one_may_be_issued_is_not_served():
    """A service whose fit waits keeps its last forecast for the cycle, but not one from before a gap."""
    class Online:
        step_s = STEP

        def __init__(self) -> None:
            self.inner = fed(6 * 3600.0)

        def update(self, name, now, value):
            self.inner.update(name, now, value)

        def forecast(self, name, now, steps):
            return self.inner.forecast(name, now, steps)

        def fit_due(self, name, now):
            return True   # every fit waits behind max_fits_per_cycle=0

    fl = make_fleet(1, 1)
    services = {"chat": ServiceStatus(name="chat", demand_rps=120.0, p99_latency_s=0.1, slo_latency_s=1.0,
                                      replicas=1)}
    fc = ServiceForecaster(Online(), 3600.0, max_fits_per_cycle=0)
    fc.last["chat"] = fc.online.forecast("chat", 6 * 3600.0, 4)
    assert fc(snapshot(fl, services=services, time=6 * 3600.0 + STEP))["chat"] is fc.last["chat"]   # recent: kept
    assert fc(snapshot(fl, services=services, time=14 * 3600.0)) == {}   # from before an 8 h gap: not served
