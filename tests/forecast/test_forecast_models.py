"""Every registered model: the Forecaster contract, and error bounds on series with known seasonality."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from forecast_synth import future_truth, tidal

from balancer.forecast import MODELS, QUANTILES, Fallback, Forecaster
from balancer.forecast.naive import SeasonalNaive

STEP = 600
NAMES = sorted(MODELS)


@pytest.fixture(scope="module")
def series() -> pd.Series:
    y, _ = tidal(days=9, step_s=STEP)
    return y


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_model_follows_the_forecaster_contract(name, series):
    model = MODELS[name]()
    assert isinstance(model, Forecaster)
    assert not [k for k in vars(model) if k.endswith("_")], "__init__ must store hyperparameters only"
    assert model.fit(series) is model
    assert [k for k in vars(model) if k.endswith("_")], "fit must keep its state in attributes ending in _"
    fc = model.predict(30)
    assert fc.horizon == 30
    assert set(QUANTILES) <= set(fc.quantiles)
    for q in QUANTILES:
        assert fc.quantiles[q].shape == (30,) and np.isfinite(fc.quantiles[q]).all()
    assert (fc.quantiles[0.5] <= fc.quantiles[0.9]).all() and (fc.quantiles[0.9] <= fc.quantiles[0.99]).all()
    assert fc.start == series.index[-1] + pd.Timedelta(seconds=STEP)
    assert model.update(series.iloc[:-3]).predict(5).horizon == 5
    # The live forecaster reuses a bucket's forecast (DemandForecaster(reuse=True)): that is exact only while an
    # update depends on the fit and the history it is given, not on how often it ran, so two updates on one history
    # forecast what one did.
    once = model.update(series).predict(5).quantiles
    twice = model.update(series).predict(5).quantiles
    for q in QUANTILES:
        np.testing.assert_array_equal(twice[q], once[q], err_msg=f"{name}: update moved state (q={q})")


# (model, steps ahead, bound on MAE against the noiseless truth); noise sd = 5, daily amplitude = 50
BOUNDS = [
    ("persistence", 1, 12.0),
    ("seasonal_naive_daily", 24, 12.0),
    ("seasonal_naive_weekly", 24, 12.0),
    ("holt_winters", 24, 10.0),
    ("mstl", 24, 10.0),
    ("gbm", 24, 12.0),
    ("profile", 24, 10.0),
    ("auto", 24, 10.0),
]


@pytest.mark.parametrize(("name", "horizon", "bound"), BOUNDS, ids=[f"{b[0]}-{b[1]}-steps" for b in BOUNDS])
def test_a_model_tracks_a_daily_tide_within_its_error_bound(name, horizon, bound):
    days = 8.5 if name != "seasonal_naive_weekly" else 14.3
    y, truth = future_truth(days, STEP, horizon)
    fc = MODELS[name]().fit(y).predict(horizon)
    mae = float(np.mean(np.abs(fc.quantiles[0.5] - truth)))
    assert mae <= bound, f"{name}: MAE {mae:.1f} > {bound}"


def test_profile_carries_todays_deviation_forward_and_lets_it_fade():
    y, _ = tidal(days=8, step_s=STEP, seed=11)
    rng = np.random.default_rng(11)
    drift = np.zeros(len(y))  # deviations from the usual tide that persist (AR(1), phi = 0.98 per step)
    for i in range(1, len(y)):
        drift[i] = 0.98 * drift[i - 1] + rng.normal(0, 4.0)
    y = y + drift
    shifted = y.copy()
    shifted.iloc[-36:] += 40.0  # today runs 40 above the usual tide
    base = MODELS["profile"]().fit(y).predict(144).quantiles[0.5]
    moved = MODELS["profile"]().fit(y).update(shifted).predict(144).quantiles[0.5]
    lift = moved - base
    assert lift[0] > 25.0  # the next step inherits most of the deviation
    assert lift[-1] < lift[0]  # and it does not grow with the horizon


def test_the_error_bound_catches_a_model_with_the_wrong_season():
    y, truth = future_truth(8.5, STEP, 24)
    broken = SeasonalNaive(period_s=43200).fit(y).predict(24)  # half a day: out of phase
    assert float(np.mean(np.abs(broken.quantiles[0.5] - truth))) > 12.0


def test_every_registered_model_is_in_the_bound_table():
    assert {b[0] for b in BOUNDS} == set(MODELS)


@pytest.mark.parametrize("name", ["persistence", "seasonal_naive_daily", "holt_winters", "mstl", "gbm", "profile"])
def test_models_forecast_finite_values_through_gaps(name):
    y, _ = tidal(days=8, step_s=STEP, seed=3)
    v = y.to_numpy().copy()
    v[200:260] = np.nan
    v[-5:] = np.nan  # the newest buckets missing too
    fc = MODELS[name]().fit(pd.Series(v, index=y.index)).predict(12)
    assert np.isfinite(fc.quantiles[0.5]).all()
    assert 0 < fc.quantiles[0.5].mean() < 300


class _Exploding:
    def fit(self, y):
        raise RuntimeError("boom")

    def update(self, y):
        return self

    def predict(self, horizon):  # pragma: no cover - never reached
        raise AssertionError


class _NaNs:
    def fit(self, y):
        self.y_ = y
        return self

    def update(self, y):
        return self

    def predict(self, horizon):
        fc = MODELS["persistence"]().fit(self.y_).predict(horizon)
        fc.quantiles[0.5] = np.full(horizon, np.nan)
        return fc


@pytest.mark.parametrize(("model", "why"), [(_Exploding(), "fit: boom"), (_NaNs(), "non-finite")],
                         ids=["a model that raises", "a model that returns NaN"])
def test_fallback_serves_persistence_and_records_why(model, why, series):
    fc = Fallback(model).fit(series).predict(6)
    assert fc.model == "persistence"
    assert why in fc.fallback_reason
    assert np.allclose(fc.quantiles[0.5], series.iloc[-1])


def test_fallback_passes_a_healthy_model_through(series):
    fc = Fallback(MODELS["seasonal_naive_daily"]()).fit(series).predict(6)
    assert fc.fallback_reason is None and fc.model == "seasonal_naive_daily"
