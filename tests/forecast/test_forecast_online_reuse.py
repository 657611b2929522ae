"""The live forecaster computes a bucket's forecast once and serves it again until a bucket closes
(`DemandForecaster(reuse=True)`): the loop asks every minute, the buckets are 10 minutes long, and nine of ten
forecasts repeated the same fit, cleaning and calibration (70% of a capacity loop's time). What a cycle gets must be
what computing every call gave: the same quantiles, issue times, fallbacks (logged and counted the same), rolling
errors, forecast-for-now paths and refit schedule, through refits, deferred fits, gaps, missing demand, failing
models and horizons changing inside a bucket."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import numpy as np
import pytest
from forecast_synth import tidal

from balancer.forecast import MODELS
from balancer.forecast.base import Fallback
from balancer.forecast.naive import Persistence
from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster

STEP = 600.0
CYCLE = 60.0
SERVICES = {"chat": 1.0, "code": 0.6}


class Flaky(Persistence):
    """Fails on some histories (update raises, predict gives NaN), as a function of the history alone."""

    name = "flaky"

    def _update(self, v):
        if np.isfinite(v).sum() % 3 == 0:
            raise RuntimeError("update diverged")
        self._fit(v)

    def _predict(self, horizon):
        out = super()._predict(horizon)
        return out * np.nan if len(self.y_) % 5 == 1 else out


def _demand(name: str, k: int, t: float, y) -> float:
    if 20 <= k < 30:
        return float("nan")   # a bucket with no usable demand
    return float(y.iloc[k // 10]) * SERVICES[name] + (t % STEP) / 100.0   # varies inside a bucket too


def _run(model: str, reuse: bool, caplog) -> tuple[list, list]:
    """Seed 2.5 days, then 2 h of one-minute cycles, with a bucket of NaN demand and a 50-minute outage (the
    forecast refused as stale, then back): everything a cycle reads, and the log."""
    y, _ = tidal(days=3, step_s=int(STEP))
    seed, rest = y.iloc[:360], y.iloc[360:]
    online = DemandForecaster(model=model, step_s=STEP, refit_every=5, reuse=reuse)
    sf = ServiceForecaster(online, 3 * 3600.0, history=lambda name, now: seed * SERVICES[name], max_fits_per_cycle=1)
    start = rest.index[0].timestamp()
    seen = []
    caplog.clear()
    for k in range(120):
        t = start + k * CYCLE
        if 40 <= k < 90:
            continue   # the loop held still: buckets nobody reported
        snap = SimpleNamespace(time=t, services={n: SimpleNamespace(demand_rps=_demand(n, k, t, rest))
                                                 for n in SERVICES}, demand_unknown={})
        out = sf(snap)
        extra = online.forecast("chat", t, 6) if k % 7 == 3 and "chat" in out else None   # another horizon
        online.update("code", t - 3 * STEP, 1e6)   # a late sample: ignored
        seen.append((k, {n: _plain(f) for n, f in out.items()}, _plain(extra), online.fallbacks(),
                     dict(online.fallback_starts), sf.unseeded(), dict(sf.refused),
                     {n: (online.rolling_error(n, 1), online.rolling_error(n, "1h"), online.forecast_for(n, t, 2),
                          online.fit_due(n, t + CYCLE)) for n in SERVICES}))
    return seen, [(r.levelno, r.getMessage()) for r in caplog.records]


def _plain(fc):
    if fc is None:
        return None
    return (fc.service, fc.issued_at, fc.step_s, {q: a.tolist() for q, a in fc.quantiles.items()})


@pytest.mark.parametrize("model", ["profile", "persistence", "seasonal_naive_daily", "mstl", "flaky"])
def test_a_reused_forecast_is_exactly_the_one_computing_every_cycle_gave(model, monkeypatch, caplog):
    monkeypatch.setitem(MODELS, "flaky", Flaky)
    with caplog.at_level(logging.DEBUG, logger="balancer.forecast"):
        every, every_logs = _run(model, False, caplog)
        reused, reused_logs = _run(model, True, caplog)
    assert sum(1 for c in every if c[1]) > 40, "most cycles must forecast"
    assert any(c[6] for c in every) and every[-1][1], "the outage's stale demand was refused, then forecast again"
    for a, b in zip(every, reused, strict=True):
        np.testing.assert_equal(b, a, err_msg=f"cycle {a[0]}")
    assert reused_logs == every_logs
    if model == "flaky":
        assert every[-1][4], "the failing model must have been served by persistence"


def test_a_bucket_s_forecast_is_computed_once_not_every_cycle(monkeypatch):
    calls = []
    predict = Fallback.predict
    monkeypatch.setattr(Fallback, "predict", lambda self, h: calls.append(h) or predict(self, h))
    y, _ = tidal(days=3, step_s=int(STEP))
    online = DemandForecaster(model="profile", step_s=STEP)
    online.observe_history("chat", y)
    start = y.index[-1].timestamp() + STEP
    for k in range(60):   # 6 buckets, 10 cycles each
        online.update("chat", start + k * CYCLE, 100.0)
        online.forecast("chat", start + k * CYCLE, 24)
    # the first bucket fits, its next cycle updates; then one update per bucket
    assert len(calls) == 7, len(calls)
