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


def test_the_p99_keeps_enough_residuals_not_to_read_the_largest_and_the_p90_keeps_its_windows():
    for h in (1, 6, 12, 24, 144, 600):
        assert calibration_window(432, h, 0.9) == calibration_window(432, h) == max(432, 7 * h) + h
        n = conformal.residual_window(432, h, 0.99)
        assert finite_level(0.99, n, h) < 1.0 or n == 10 * 432  # capped at ten base windows
    assert conformal.residual_window(432, 6, 0.99) == 432  # an hour ahead the base window is enough
    assert conformal.residual_window(432, 12, 0.99) == 1188  # two hours ahead: n_eff 2q/(1-q)


def test_the_backtest_p99_reads_its_own_longer_window():
    # two-hour-ahead residuals: a burst (+100%) early on, calm (+-1%) since; at the last origin the burst is older
    # than the p90's three days (432 steps + h) but within the p99's 1188 + h
    h, n = 12, 1700
    rng = np.random.default_rng(1)
    truth = 1000 + rng.uniform(-10, 10, n)
    truth[300:600] = 2000.0
    origins = np.arange(n - h)
    p50 = np.full(len(origins), 1000.0)
    windows = {q: calibration_window(432, h, q) for q in (0.9, 0.99)}
    cal = calibrate_path(origins, h, p50, {0.9: p50.copy(), 0.99: p50.copy()}, truth,
                         window=calibration_window(432, h), windows=windows)
    assert cal[0.9][-1] < 1011
    assert cal[0.99][-1] == pytest.approx(2000.0, rel=1e-3)
    same = calibrate_path(origins, h, p50, {0.9: p50.copy(), 0.99: p50.copy()}, truth,
                          window=calibration_window(432, h))
    assert same[0.99][-1] < 1011  # without `windows` every quantile reads `window`, as before
