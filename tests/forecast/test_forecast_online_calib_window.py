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


CASES = [  # (case, h, the p90's window, the p99's window)
    ("one-hour horizons keep the base window", 6, 3 * DAY, 3 * DAY),
    # three days of two-hour-ahead residuals have the p99 read the largest: it keeps 0.99 x 12 / 0.01 steps
    ("two-hour horizons keep more for the p99", 12, 3 * DAY, 1188),
    ("day-ahead horizons keep a week, the p99 at most ten base windows", DAY, 7 * DAY, 10 * 3 * DAY),
]


@pytest.mark.parametrize(("case", "h", "p90", "p99"), CASES, ids=[c[0] for c in CASES])
def test_each_horizon_keeps_its_own_residual_window(case, h, p90, p99):
    cal = OnlineCalibrator(window=3 * DAY)
    for _ in range(5000):
        cal.add(h, 1.0, 1.0)
    assert residual_window(3 * DAY, h) == residual_window(3 * DAY, h, 0.9) == p90
    assert len(cal.residuals[h]) == residual_window(3 * DAY, h, 0.99) == p99


def test_the_p90_reads_its_own_window_and_the_p99_the_longer_one():
    # 1188 residuals at two hours ahead: an old burst (the first 300: +100%), then calm errors of +-1%
    cal = OnlineCalibrator(window=3 * DAY)
    rng = np.random.default_rng(0)
    for k in range(1188):
        cal.add(12, 2000.0 if k < 300 else 1000.0 + rng.uniform(-10, 10), 1000.0)
    out = cal.apply(np.full(12, 1000.0), {0.9: np.full(12, 1000.0), 0.99: np.full(12, 1000.0)})
    assert out[0.9][-1] < 1011  # the p90 reads the last three days only: the burst is out of its window
    assert out[0.99][-1] == pytest.approx(2000.0)  # the p99's window holds the burst, 25% of it


def test_live_day_ahead_p90_covers_about_90_percent_of_day_long_errors():
    coverage = np.mean([_day_ahead_coverage(_errors(seed)) for seed in range(6)])
    assert 0.85 <= coverage <= 0.95, coverage  # three days' largest residual: 0.98


def test_the_ring_reads_the_same_residuals_a_list_of_the_last_ones_would():
    # more residuals than the ring holds (it wraps round several times): each quantile is read from exactly the last
    # residual_window(window, h, q) of them, as from a list of everything added
    cal, h = OnlineCalibrator(window=3 * DAY), 12
    rng = np.random.default_rng(3)
    truth = 1000.0 + rng.normal(0, 50, 3000) + np.linspace(0, 400, 3000)   # drifting: the window's position matters
    added = []
    for y in truth:
        cal.add(h, float(y), 1000.0)
        added.append((y - 1000.0) / 1000.0)
    ring = cal.residuals[h]
    assert ring.buf.dtype == np.float64 and ring.buf.nbytes == 8 * residual_window(3 * DAY, h, 0.99)
    for q in (0.9, 0.99):
        k = residual_window(3 * DAY, h, q)
        assert sorted(ring.last(k)) == pytest.approx(sorted(added[-k:]))
