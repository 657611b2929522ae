"""The calibration's corrections for residuals that are not exchangeable: effective sample size and ACI."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.forecast import conformal
from balancer.forecast.conformal import calibrate_path, calibration_window, finite_level

LEVELS = [
    ("many independent one-step residuals barely move the level", 0.9, 1000, 1, 0.9, 0.901),
    ("a week of day-ahead residuals counts as about 14 draws", 0.9, 1008, 144, 0.96, 0.97),
    ("fewer draws than the level needs reads the largest residual", 0.9, 50, 144, 1.0, 1.0),
]


@pytest.mark.parametrize(("case", "q", "n", "h", "lo", "hi"), LEVELS, ids=[c[0] for c in LEVELS])
def test_finite_sample_level_counts_overlapping_forecasts_once(case, q, n, h, lo, hi):
    assert lo <= finite_level(q, n, h) <= hi


def test_long_horizons_keep_a_window_proportional_to_the_horizon():
    assert calibration_window(432, 6) == 432 + 6
    assert calibration_window(432, 144) == 7 * 144 + 144


def _day_long_errors(seed: int, n: int = 6000, h: int = 144) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return 1000 + np.repeat(rng.normal(0, 80, n // h + 2), h)[:n] + rng.normal(0, 10, n)


def _coverage(truth: np.ndarray, h: int, **kw) -> float:
    origins = np.arange(len(truth) - h)
    p50 = np.full(len(origins), 1000.0)
    cal = calibrate_path(origins, h, p50, {0.9: p50.copy(), 0.99: p50.copy()}, truth,
                         window=calibration_window(432, h), **kw)
    return float(np.mean(truth[origins[2000:] + h] <= cal[0.9][2000:]))


def test_day_long_error_runs_are_covered_better_with_the_effective_sample_size(monkeypatch):
    corrected = np.mean([_coverage(_day_long_errors(s), 144) for s in range(5)])
    monkeypatch.setattr(conformal, "finite_level", lambda q, n, h: q)
    plain = np.mean([_coverage(_day_long_errors(s), 144) for s in range(5)])
    assert corrected >= plain + 0.015, (corrected, plain)


def test_adaptive_level_restores_coverage_when_the_spread_keeps_growing():
    rng = np.random.default_rng(3)
    n = 4000
    truth = 1000 + rng.normal(0, 1, n) * np.linspace(10, 60, n)
    origins = np.arange(n - 1)
    p50 = np.full(n - 1, 1000.0)

    def cover(gamma: float) -> float:
        cal = calibrate_path(origins, 1, p50, {0.9: p50.copy(), 0.99: p50.copy()}, truth, window=2000,
                             gamma=gamma)
        return float(np.mean(truth[origins[1000:] + 1] <= cal[0.9][1000:]))

    assert cover(0.0) < 0.85  # a trailing window lags a spread that keeps growing
    assert 0.87 <= cover(0.01) <= 0.93
