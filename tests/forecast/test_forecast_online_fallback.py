"""A model the live forecaster replaces by persistence is never replaced silently: with model `auto`, a candidate
that failed was served by persistence inside the ensemble with no log line and nothing the controller could export
(its Fallback's reason was dropped by the ensemble); the whole model failing set a reason nobody read."""

from __future__ import annotations

import logging

import numpy as np
from forecast_synth import tidal

from balancer.forecast import MODELS
from balancer.forecast.gbm import QuantileGBM
from balancer.forecast.naive import Persistence
from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster

STEP = 600.0


def _fed(model: str) -> tuple[DemandForecaster, float]:
    online = DemandForecaster(model=model, step_s=STEP)
    y, _ = tidal(days=3, step_s=int(STEP))
    online.observe_history("chat", y)
    return online, y.index[-1].timestamp() + STEP


def test_a_failing_auto_candidate_is_logged_counted_and_listed(monkeypatch, caplog):
    def broken(self, v):
        raise RuntimeError("solver diverged")

    monkeypatch.setattr(QuantileGBM, "_fit", broken)
    online, now = _fed("auto")
    with caplog.at_level(logging.WARNING, logger="balancer.forecast.online"):
        fc = online.forecast("chat", now, 6)
        online.forecast("chat", now + STEP, 6)   # still failing: one warning, one start, not one per cycle
    assert np.isfinite(fc.quantiles[0.5]).all()   # the controller still gets a forecast
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, warnings
    assert "chat" in warnings[0] and "gbm" in warnings[0] and "solver diverged" in warnings[0], warnings
    assert "persistence" in warnings[0] and "auto" in warnings[0], warnings
    assert list(online.fallbacks()) == [("chat", "gbm")]
    assert online.fallback_starts == {("chat", "gbm"): 1}
    assert ServiceForecaster(online, 3600.0).fallbacks() == online.fallbacks()   # what the controller exports

    monkeypatch.undo()   # the candidate works again: the next refit leaves the fallback list
    online.refit_every = 1
    with caplog.at_level(logging.INFO, logger="balancer.forecast.online"):
        online.forecast("chat", now + 2 * STEP, 6)
    assert online.fallbacks() == {}
    assert any("gbm" in r.getMessage() and "again" in r.getMessage() for r in caplog.records)


def test_the_configured_model_failing_is_named_too(monkeypatch, caplog):
    class Broken(Persistence):
        name = "broken"

        def _fit(self, v):
            raise ValueError("no convergence")

    monkeypatch.setitem(MODELS, "broken", Broken)
    online, now = _fed("broken")
    with caplog.at_level(logging.WARNING, logger="balancer.forecast.online"):
        online.forecast("chat", now, 6)
    assert online.fallbacks() == {("chat", "broken"): "Broken.fit: no convergence"}
    assert any("broken" in r.getMessage() and "no convergence" in r.getMessage() for r in caplog.records)
    online.forget("chat")
    assert online.fallbacks() == {}
