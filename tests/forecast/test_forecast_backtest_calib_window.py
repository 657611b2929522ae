"""The backtest feeds long horizons the calibration window the calibrator asks for (`calibration_window`).

It once ran origins for `calib_days` plus the longest horizon before scoring, whatever that window: a day-ahead
horizon started scoring with three days of residuals (an effective sample of 6) and read its p90 at the largest.
"""

from __future__ import annotations

import numpy as np
import pytest
from forecast_synth import tidal

from balancer.forecast.backtest import backtest
from balancer.forecast.conformal import calibration_window

DAY = 86400
CASES = [
    ("eleven days of history hold the day-ahead horizon's whole window", 22, 11, [3600, DAY],
     calibration_window(432, 144)),
    ("a week of history leaves two days of burn-in, no more", 14, 7, [3600, DAY], 7 * 144 - 2 * 144),
    ("short horizons keep calib_days plus the longest horizon", 14, 7, [3600, 4 * 3600], 432 + 24),
]


@pytest.mark.parametrize(("case", "days", "history", "horizons", "expected"), CASES, ids=[c[0] for c in CASES])
def test_calibration_origins_cover_the_longest_horizons_window(case, days, history, horizons, expected):
    y, _ = tidal(days=days, seed=1)
    _, details = backtest(y, models=["persistence"], horizons_s=horizons, min_train_days=history)
    assert details["calibration_origins"] == expected


def test_day_ahead_p90_does_not_read_the_largest_residual_when_scoring_starts():
    """Independent noise around a known tide: the first scored day's p90 reads the level its window allows
    (about the 96th percentile), not the largest of three days of residuals (which covers all but 1 in 433)."""
    first_day = []
    for seed in range(4):
        y, _ = tidal(days=22, noise=8.0, seed=seed)
        _, details = backtest(y, models=["seasonal_naive_daily"], horizons_s=[DAY], min_train_days=11,
                              keep_paths=True)
        p = details["paths"][("seasonal_naive_daily", "24h")].iloc[:144]
        first_day.append(float(np.mean(p["actual"] <= p[0.9])))
    assert np.mean(first_day) < 0.985, first_day
