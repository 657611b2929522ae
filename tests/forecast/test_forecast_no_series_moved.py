"""A running service with no series under its own name is kept seen (a gap: every scrape lost) only where its series
are nowhere else. One whose series are read under namespace-qualified names (`prod/chat`, `dev/chat`: a namesake in
another namespace) or whose status a shard leaves out for being spread over two shards (`spread_services`) has its
demand read elsewhere: kept, its unqualified model was never fed (a hole of unknown buckets) and it had no forecast
the cycle it came back. Forgotten after a day, it is seeded again from its history then, as before 0960f10."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster
from balancer.model import ServiceStatus
from tests.loop.loop_helpers import make_fleet, snapshot, workload

DAY = 86400.0
T0 = 20 * DAY
FL = make_fleet(1, 2)
POD = workload("chat-0")


def demand(t: float) -> float:
    return 50.0 + 40.0 * math.sin(2 * math.pi * t / DAY)


def status(name: str, t: float) -> ServiceStatus:
    return ServiceStatus(name=name, demand_rps=demand(t), p99_latency_s=0.1, slo_latency_s=0.5, replicas=1)


def history(name: str, now: float) -> pd.Series:
    idx = pd.date_range(pd.Timestamp(now - 14 * DAY, unit="s"), pd.Timestamp(now, unit="s"), freq="600s",
                        inclusive="left")
    return pd.Series([demand(x.timestamp()) for x in idx], index=idx)


def snap(t: float, services=(), unknown=(), spread=()):
    """chat's pod placed on GPU 0, with the statuses (and unknown demands) named."""
    return snapshot(FL, workloads=[(POD, (0,))], time=t, services={n: status(n, t) for n in services}).replace(
        demand_unknown={n: "stalled" for n in unknown}, spread_services=frozenset(spread))


def run(fc: ServiceForecaster, start: float, end: float, **kw) -> dict:
    out = {}
    t = start
    while t < end:
        out = fc(snap(t, **kw))
        t += 600.0
    return out


def forecaster() -> tuple[ServiceForecaster, DemandForecaster]:
    online = DemandForecaster(model="persistence", step_s=600.0, history_days=14)
    return ServiceForecaster(online, 3600.0, history=history), online


@pytest.mark.parametrize("qualified", [{"services": ["prod/chat", "dev/chat"]}, {"unknown": ["prod/chat"]},
                                       {"services": ["prod/chat"], "unknown": ["dev/chat"]}])
def test_a_running_service_read_under_qualified_names_is_forgotten_after_a_day(qualified):
    fc, online = forecaster()
    run(fc, T0, T0 + 6 * 3600, services=["chat"])
    run(fc, T0 + 6 * 3600, T0 + 6 * 3600 + DAY + 1200, **qualified)
    assert "chat" not in fc.seen and "chat" not in online.services(), sorted(fc.seen)
    assert "prod/chat" in fc.seen


def test_a_running_service_spread_over_two_shards_is_forgotten_and_forecast_the_cycle_it_comes_back():
    fc, online = forecaster()
    run(fc, T0, T0 + DAY / 2, services=["chat"])
    back = T0 + 2.5 * DAY
    run(fc, T0 + DAY / 2, back, spread=["chat"])   # its status left out of this shard, its pod here
    assert "chat" not in fc.seen and "chat" not in online.services()
    assert "chat" in fc(snap(back, services=["chat"])), "no forecast the cycle it came back"


def test_a_running_service_with_no_series_anywhere_is_still_kept():
    fc, online = forecaster()
    run(fc, T0, T0 + 6 * 3600, services=["chat"])
    run(fc, T0 + 6 * 3600, T0 + 6 * 3600 + DAY + 1200, services=["prod/embed"])   # another name's qualified series
    assert "chat" in fc.seen and "chat" in online.services()
