"""The backtest's conformal calibration at an origin may use only what was known there."""

from __future__ import annotations

import numpy as np

from balancer.forecast.conformal import calibrate_path


def test_calibration_at_an_origin_ignores_demand_after_it():
    """The residual floor (a share of the mean demand) was the mean of the whole trace, future included: a busy
    week after the origin widened the intervals of a quiet night before it."""
    rng = np.random.default_rng(0)
    n, h = 600, 3
    origins = np.arange(n - h)
    truth = 1.0 + rng.random(n)  # quiet demand; the forecasts are much lower still, so the floor binds
    p50 = np.full(len(origins), 0.01)
    raw = {0.5: p50.copy(), 0.9: p50 * 2, 0.99: p50 * 3}
    later = truth.copy()
    later[400:] *= 1000.0  # what comes after origin 399 changes, nothing before it
    a = calibrate_path(origins, h, p50, raw, truth, window=200)
    b = calibrate_path(origins, h, p50, raw, later, window=200)
    for q in (0.9, 0.99):
        np.testing.assert_array_equal(a[q][:400], b[q][:400])
