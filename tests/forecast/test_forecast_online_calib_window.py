"""The live calibrator keeps as many residuals per horizon as the backtest's (`conformal.residual_window`).

With the same window for every horizon (three days), a day-ahead horizon had an effective sample of 6 and its
p90 was always the largest residual it kept.
"""

from __future__ import annotations

import numpy as np
import pytest

from balancer.forecast.conformal import OnlineCalibrator, residual_window

DAY = 144  # steps of 10 minutes


def _errors(seed: int, n: int = 5000) -> np.ndarray:
    """Demand around a forecast of 1000: an error shared by each whole day plus independent noise."""
    rng = np.random.default_rng(seed)
    return 1000 + np.repeat(rng.normal(0, 60, n // DAY + 2), DAY)[:n] + rng.normal(0, 40, n)


def _day_ahead_coverage(truth: np.ndarray, start: int = 2000) -> float:
    """p90 coverage of day-ahead forecasts (p50 = 1000), calibrated on the residuals known when issued."""
    cal = OnlineCalibrator(window=3 * DAY)
    p50, raw = np.full(DAY, 1000.0), {0.9: np.full(DAY, 1000.0), 0.99: np.full(DAY, 1000.0)}
    hits = []
    for t in range(len(truth) - DAY):
        if t >= DAY:
            cal.add(DAY, float(truth[t]), 1000.0)  # the forecast issued a day ago for now
        if t >= start:
            hits.append(truth[t + DAY] <= cal.apply(p50, raw)[0.9][-1])
    return float(np.mean(hits))


CASES = [
    ("one-hour horizons keep the base window", 6, 3 * DAY),
    ("day-ahead horizons keep a week", DAY, 7 * DAY),
]


@pytest.mark.parametrize(("case", "h", "expected"), CASES, ids=[c[0] for c in CASES])
def test_each_horizon_keeps_its_own_residual_window(case, h, expected):
    cal = OnlineCalibrator(window=3 * DAY)
    for _ in range(2000):
        cal.add(h, 1.0, 1.0)
    assert len(cal.residuals[h]) == expected == residual_window(3 * DAY, h)


def test_live_day_ahead_p90_covers_about_90_percent_of_day_long_errors():
    coverage = np.mean([_day_ahead_coverage(_errors(seed)) for seed in range(6)])
    assert 0.85 <= coverage <= 0.95, coverage  # three days' largest residual: 0.98
