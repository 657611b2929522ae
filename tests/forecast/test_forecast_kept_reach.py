"""A forecast kept while a service's fit waits still reaches the end of the planner's window [now, now + horizon].

`ServiceForecaster` serves a kept forecast up to 4 steps after its `issued_at`, but asked the online forecaster for
only 3 steps past the horizon: a forecast kept that long ended up to a step before the window did, and
`Forecast.window_max` read only what it had, so a rise at the end of a reclaim's lead was missed (the reclaim came a
cycle late, inference short of replicas for it)."""

from __future__ import annotations

import math

import numpy as np

from balancer.forecast.service import ServiceForecaster
from balancer.model import Forecast, ServiceStatus
from balancer.plan.capacity_plan import forecast_peak, forecast_reach_s
from tests.loop.loop_helpers import make_fleet, snapshot

STEP = 300.0
B = 1000   # the bucket the forecast is computed in
HORIZON_S = 3600.0


class Online:
    """Issues as `DemandForecaster` does (at the start of the bucket before now, step 1 the current bucket), a p90
    rising one req/s a step; every fit is due, so with `max_fits_per_cycle=0` each cycle keeps the last forecast."""

    step_s = STEP

    def update(self, name, now, value):
        pass

    def fit_due(self, name, now):
        return True

    def forecast(self, name, now, steps):
        b_now = math.floor(now / STEP)
        return Forecast(service=name, issued_at=(b_now - 1) * STEP, step_s=STEP,
                        quantiles={0.9: np.arange(b_now, b_now + steps, dtype=float)})


def test_a_kept_forecast_reaches_the_end_of_the_window_for_as_long_as_it_is_served():
    fl = make_fleet(1, 1)
    services = {"chat": ServiceStatus(name="chat", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=1.0,
                                      replicas=1)}
    sf = ServiceForecaster(Online(), HORIZON_S, max_fits_per_cycle=0)
    served = 0
    for offset in np.arange(0.0, 6 * STEP, 30.0):
        sf.last["chat"] = sf.online.forecast("chat", B * STEP, sf.steps)   # computed at the bucket's start
        now = B * STEP + float(offset)
        kept = sf(snapshot(fl, services=services, time=now)).get("chat")
        if kept is None:
            continue
        served += 1
        assert forecast_reach_s(kept, now) >= HORIZON_S, offset
        # the rising p90's peak is the bucket holding the window's end: the rise at its end is read
        assert forecast_peak(kept, 0.9, now, HORIZON_S) >= math.floor((now + HORIZON_S) / STEP), offset
    assert served > 3 * STEP / 30.0   # kept for more than 3 steps: the ages that ran past the end are tested
