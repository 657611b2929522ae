"""A service gets no forecast, so the capacity planner lends none of its GPUs, until it has the demand history a
tidal forecast needs: its model's daily season (twice for MSTL and Holt-Winters, which statsmodels fits from two
cycles) plus the horizon. A history query answered with no data (a new or renamed service, or any after Prometheus
lost its data) or with an hour of it used to give a forecast after 12 buckets: flat at the night's level, and the
planner lent the replicas just before the morning rise (audit short_plan.py: 'history 1 h: chat 12 -> 2')."""

from __future__ import annotations

import logging
from types import MappingProxyType, SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from balancer.forecast.online import DemandForecaster, tide_history_s
from balancer.forecast.service import ServiceForecaster
from balancer.model import ScaleInference
from balancer.plan.capacity import CapacityPolicy, CapacityView, ServiceCapacity, ServiceView
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled

STEP = 300.0
DAY0 = 1_767_225_600.0            # 2026-01-01 00:00 UTC
NOW = DAY0 + 7 * 86400 + 6 * 3600   # day 8, 06:00 UTC: the rise starts at 06:30


def demand(t):
    """Night 50 req/s, rising from 06:30 to 500 by 09:00, down again in the evening."""
    h = (np.asarray(t) % 86400) / 3600
    return 50 + 450 * np.clip((h - 6.5) / 2.5, 0, 1) * np.clip((22 - h) / 3, 0, 1)


def history(hours: float) -> pd.Series:
    t = np.arange(NOW - hours * 3600, NOW, STEP)
    return pd.Series(demand(t), index=pd.to_datetime(t, unit="s", utc=True))


def snap(t: float, rps: float = 50.0):
    return SimpleNamespace(time=t, services={"chat": SimpleNamespace(demand_rps=rps)}, demand_unknown={})


def replicas_planned(forecasts) -> int:
    prof = ServiceCapacity(name="chat", rps_per_replica=30.0, warmup_s=300.0, min_replicas=1, max_replicas=40,
                           home_replicas=12)
    sv = ServiceView(profile=prof, demand_rps=50.0, replicas=12, gpus_by_model=MappingProxyType({"A100": 12}))
    v = CapacityView(time=NOW, free=MappingProxyType({"A100": 0}), services=(sv,), jobs=(), inference_gpus=12,
                     training_gpus=0, total_gpus=12)
    d = plan_capacity(v, forecasts, CapacityPolicy(), settled(v))
    return next((a.replicas for a in d.actions if isinstance(a, ScaleInference)), 12)


@pytest.mark.parametrize("model, hours", [("mstl", 48), ("holt_winters", 48), ("auto", 48),
                                          ("seasonal_naive_daily", 24), ("profile", 24), ("gbm", 24),
                                          ("seasonal_naive_weekly", 168), ("persistence", 0)])
def test_each_model_needs_its_daily_season_as_many_times_as_it_fits_it_before_a_forecast(model, hours):
    assert tide_history_s(model) == hours * 3600


def test_a_service_with_an_hour_of_history_gets_no_forecast_and_the_planner_lends_none_of_its_replicas(caplog):
    short = ServiceForecaster(DemandForecaster(model="mstl", step_s=STEP), 7200, history=lambda s, n: history(1))
    week = ServiceForecaster(DemandForecaster(model="mstl", step_s=STEP), 7200, history=lambda s, n: history(168))
    with caplog.at_level(logging.WARNING, logger="balancer.forecast.service"):
        out = short(snap(NOW))
    assert out == {} and short.unseeded() == ["chat"]   # gputide_forecast_history_waiting{service="chat"} 1
    assert replicas_planned(out) == 12
    said = [r.getMessage() for r in caplog.records]
    assert len(said) == 1 and "chat: 1 h of demand history, a forecast needs 50.3 h" in said[0], said
    seeded = week(snap(NOW))
    assert "chat" in seeded and week.unseeded() == [] and replicas_planned(seeded) == 12


def test_a_new_service_answered_with_no_data_waits_a_day_of_watching_and_is_warned_about_once(caplog):
    sf = ServiceForecaster(DemandForecaster(model="seasonal_naive_daily", step_s=STEP), 3600, history=lambda s, n: None)
    t0 = DAY0 + 5 * 3600
    need = 86400 / STEP + 3600 / STEP + 4   # a day, the horizon, the steps a served forecast may be issued before now
    got = []
    with caplog.at_level(logging.INFO, logger="balancer.forecast.service"):
        for k in range(int(need) + 2):
            got.append("chat" in sf(snap(t0 + STEP * k)))
    first = got.index(True)
    assert not any(got[:first]) and all(got[first:]) and first == need   # closed buckets before step k: k
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "a forecast needs 25.3 h" in warnings[0].getMessage()
    assert any("forecast for chat again" in r.getMessage() for r in caplog.records)
    assert sf.unseeded() == []


def test_the_seven_days_the_demos_seed_forecast_from_the_first_cycle_with_every_model():
    for model in ("mstl", "seasonal_naive_daily", "auto"):
        sf = ServiceForecaster(DemandForecaster(model=model, step_s=3600.0), 3 * 3600,
                               history=lambda s, n: history(168).resample("1h").mean())
        assert "chat" in sf(snap(NOW)), model


def test_one_bucket_in_five_filled_by_a_five_minute_cycle_forecasts_after_the_span_not_five_times_later():
    """step_s 60 s and --interval 5m fill one bucket in five: counting finite buckets made a service wait 250 h of
    live cycles for its 50 h (after 240 h: 'chat: 48 h of demand history'). The span covered counts; a 6 h outage
    does not (its service still waits at 55 h, 48.9 h covered)."""
    from balancer.cmd._run_parts import stale_steps
    from balancer.forecast.online import ShortHistory

    step, interval, horizon = 60.0, 300.0, 135   # the 2.25 h of the refusal message, at 60 s steps
    online = DemandForecaster(model="mstl", step_s=step, max_stale_steps=stale_steps(interval, step))
    outage = (DAY0 + 30 * 3600, DAY0 + 36 * 3600)

    def live(until: float, since: float = DAY0) -> None:
        for t in np.arange(since, until, interval):
            online.update("chat", t, float(demand(t)))
            if not outage[0] <= t < outage[1]:
                online.update("gap", t, float(demand(t)))

    live(DAY0 + 49.5 * 3600)
    with pytest.raises(ShortHistory, match=r"chat: 49.\d h of demand history, a forecast needs 50.2 h"):
        online.forecast("chat", DAY0 + 49.5 * 3600, horizon)
    live(DAY0 + 51 * 3600, DAY0 + 49.5 * 3600)
    assert online.forecast("chat", DAY0 + 51 * 3600, horizon).service == "chat"
    live(DAY0 + 55 * 3600, DAY0 + 51 * 3600)
    with pytest.raises(ShortHistory, match=r"gap: 48.9 h of demand history"):
        online.forecast("gap", DAY0 + 55 * 3600, horizon)
