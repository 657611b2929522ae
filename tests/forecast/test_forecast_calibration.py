"""Conformal calibration of the p90, the backtest's honesty, and the ensemble weights."""

from __future__ import annotations

import numpy as np
import pytest
from forecast_synth import tidal
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.forecast.auto import ensemble_weights
from balancer.forecast.backtest import backtest
from balancer.forecast.conformal import OnlineCalibrator, calibrate_path


@pytest.mark.parametrize("spread", [1.0, 10.0, 100.0], ids=["narrow", "medium", "wide"])
def test_calibrated_p90_covers_about_90_percent_whatever_the_raw_intervals(spread):
    rng = np.random.default_rng(1)
    n = 3000
    truth = 1000 + rng.normal(0, 50, n)
    origins = np.arange(n - 1)
    p50 = np.full(len(origins), 1000.0)
    raw = {0.9: p50 + spread, 0.99: p50 + 2 * spread}
    cal = calibrate_path(origins, 1, p50, raw, truth, window=500)
    covered = truth[origins[600:] + 1] <= cal[0.9][600:]
    assert 0.86 <= covered.mean() <= 0.94


def test_calibration_uses_only_residuals_already_known():
    truth = np.concatenate([np.full(100, 10.0), np.full(100, 1000.0)])
    origins = np.arange(190)
    p50 = np.full(190, 10.0)
    cal = calibrate_path(origins, 5, p50, {0.9: p50.copy(), 0.99: p50.copy()}, truth, window=1000, min_n=10)
    # at origin 94 the first jump (at t=100) is not known yet: no widening may have leaked in
    assert cal[0.9][94] == pytest.approx(10.0)
    assert cal[0.9][150] > 500


def test_online_calibrator_widens_to_the_residuals_it_has_seen():
    cal = OnlineCalibrator(window=500, min_n=20)
    rng = np.random.default_rng(2)
    for v in 100 + rng.normal(0, 10, 400):
        cal.add(1, v, 100.0)
    out = cal.apply(np.full(3, 100.0), {0.9: np.full(3, 100.0), 0.99: np.full(3, 100.0)})
    assert 108 < out[0.9][0] < 118 and out[0.99][0] > out[0.9][0]


@pytest.mark.parametrize("hetero", [False, True], ids=["constant noise", "noise grows with demand"])
def test_backtest_p90_coverage_on_a_synthetic_tide(hetero):
    y, _ = tidal(days=10, noise=8.0, hetero=hetero, seed=4)
    scores, details = backtest(y, models=["seasonal_naive_daily", "holt_winters"], horizons_s=[3600, 4 * 3600],
                               min_train_days=6, calib_days=3)
    assert details["fallbacks"] == {}
    for s in scores:
        assert 0.83 <= s.coverage_p90 <= 0.96, s
    hw = {s.horizon: s for s in scores if s.model == "holt_winters"}
    assert hw["1h"].mase_persistence < 1.0  # beats persistence on a clean tide


def test_backtest_scores_baselines_against_themselves():
    y, _ = tidal(days=6, seed=5)
    scores, _ = backtest(y, models=["persistence", "seasonal_naive_daily"], horizons_s=[3600], min_train_days=3,
                         calib_days=1)
    by = {s.model: s for s in scores}
    assert by["persistence"].mase_persistence == pytest.approx(1.0)
    assert by["seasonal_naive_daily"].mase_seasonal == pytest.approx(1.0)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.lists(st.one_of(st.floats(0.01, 1e6), st.just(float("nan"))), min_size=3, max_size=3),
                min_size=1, max_size=6), st.integers(1, 4))
def test_ensemble_weights_are_a_distribution_favouring_the_smaller_error(rows, top):
    mae = np.array(rows).T  # [models=3, horizons]
    w = ensemble_weights(mae, top)
    assert np.allclose(w.sum(axis=0), 1.0) and (w >= 0).all()
    for j in range(mae.shape[1]):
        col = mae[:, j]
        if np.isfinite(col).any():
            best = int(np.nanargmin(col))
            assert w[best, j] == pytest.approx(w[:, j].max())
