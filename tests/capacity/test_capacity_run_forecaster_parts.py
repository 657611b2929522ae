"""How `gputide run` builds its forecaster (`_run_parts.capacity_parts`): a staleness limit that spans a cycle, and a
warning when `spec.forecast.timezone` names a zone the forecast model has no calendar to read it in.

With forecast.step_s 60 s and --interval 5m each bucket got a sample once in five, and the fixed limit of 3 stale
steps refused every forecast but the first, for ever, logged at debug (audit interval.py)."""

from __future__ import annotations

import dataclasses
import logging
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from balancer.cli import build_parser
from balancer.cmd._run_parts import calendar_unread, capacity_parts, stale_steps
from balancer.config import BalancerPolicy
from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster
from balancer.plan.capacity import ServiceCapacity

STEP, INTERVAL = 60.0, 300.0
T0 = 1_767_225_600.0
WEEK = pd.Series(100.0 + np.arange(7 * 1440) % 50,
                 index=pd.date_range(pd.Timestamp(T0 - 7 * 86400, unit="s", tz="UTC"), periods=7 * 1440, freq="60s"))


def parts(interval: float, step: float = STEP, timezone: str = "UTC", model: str | None = None,
          history: str | None = None):
    argv = ["run", "--dry-run", "--prometheus=http://prometheus:9090", "--services", "unused.yaml"]
    argv += (["--forecast-model", model] if model else []) + (["--forecast-history", history] if history else [])
    args = build_parser().parse_args(argv)
    base = BalancerPolicy()
    policy = dataclasses.replace(base, capacity=dataclasses.replace(base.capacity, enabled=True),
                                 forecast=dataclasses.replace(base.forecast, step_s=step, timezone=timezone))
    return capacity_parts(args, policy, None, interval, {"chat": ServiceCapacity(name="chat", rps_per_replica=10)})


def cycles(forecaster: ServiceForecaster, n: int = 24) -> list[bool]:
    out = []
    for k in range(n):
        s = SimpleNamespace(time=T0 + k * INTERVAL, services={"chat": SimpleNamespace(demand_rps=100.0)},
                            demand_unknown={})
        out.append("chat" in forecaster(s))
    return out


@pytest.mark.parametrize("interval, step, limit", [(300, 60, 8), (30, 300, 4), (600, 600, 4), (3600, 60, 63)])
def test_the_staleness_limit_spans_one_cycle_plus_three_steps(interval, step, limit):
    assert stale_steps(interval, step) == limit
    _, forecaster = parts(interval, step)
    assert forecaster.online.max_stale_steps == limit


def test_a_cycle_of_five_forecast_steps_gets_a_forecast_every_cycle():
    online = DemandForecaster(model="persistence", step_s=STEP, max_stale_steps=stale_steps(INTERVAL, STEP))
    assert all(cycles(ServiceForecaster(online, 7200, history=lambda s, n: WEEK)))


def test_a_refused_forecast_is_warned_about_once_while_it_lasts(caplog):
    online = DemandForecaster(model="persistence", step_s=STEP, max_stale_steps=3)   # the limit before
    with caplog.at_level(logging.DEBUG, logger="balancer.forecast.service"):
        got = cycles(ServiceForecaster(online, 7200, history=lambda s, n: WEEK))
    assert got == [True] + [False] * 23
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1 and "no forecast for chat" in warnings[0] and "steps ago" in warnings[0], warnings


@pytest.mark.parametrize("model, timezone, warned", [
    ("mstl", "Europe/Berlin", True), ("holt_winters", "America/New_York", True), ("persistence", "Asia/Tokyo", True),
    ("mstl", "UTC", False), ("auto", "Europe/Berlin", False), ("seasonal_naive_daily", "Europe/Berlin", False),
    ("gbm", "Europe/Berlin", False), ("profile", "Europe/Berlin", False)])
def test_a_time_zone_the_model_has_no_calendar_for_is_warned_about_at_start(caplog, model, timezone, warned):
    with caplog.at_level(logging.WARNING, logger="balancer.cmd.run"):
        parts(30.0, 300.0, timezone, model)
    said = [r.getMessage() for r in caplog.records if "spec.forecast.timezone" in r.getMessage()]
    assert bool(said) == warned and calendar_unread(model, timezone) == warned
    if warned:
        assert f"spec.forecast.timezone {timezone} is not read by the {model} forecast model" in said[0]



@pytest.mark.parametrize("model, history, need, enough", [
    ("mstl", "24h", "50.3 h", "3d"), (None, "2d", "50.3 h", None), ("seasonal_naive_weekly", "7d", "170 h", None),
    ("persistence", None, None, "1h")])
def test_a_forecast_history_shorter_than_the_model_needs_is_warned_about_at_start(caplog, model, history, need,
                                                                                  enough):
    """--forecast-history 24h with mstl (50.3 h with the horizon) was accepted silently: each service waited two
    days of live cycles, and a controller restarted more often (history is in memory only) never forecast. A history
    that covers the model (the 14d default does for every one; persistence needs no tide) is not warned about."""
    def warned(history: str | None) -> list[str]:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="balancer.cmd.run"):
            assert parts(30.0, 300.0, model=model, history=history)[1] is not None   # a warning, not a refusal
        return [r.getMessage() for r in caplog.records if "--forecast-history" in r.getMessage()]

    assert warned(enough) == []
    if need is None:
        assert warned("1m") == []
        return
    said = warned(history)
    assert len(said) == 1, said
    assert f"--forecast-history {history} reads less" in said[0] and f"the {model or 'mstl'} forecast" in said[0]
    assert f"needs ({need}:" in said[0]
