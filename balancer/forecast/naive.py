"""Naive baselines: persistence (the last value) and seasonal naive (same time one day / one week ago).

They are the yardsticks every other model is scored against (MASE), the fallback when a model fails, and
useful forecasters in their own right: persistence is hard to beat a few minutes ahead, seasonal naive a day
ahead. Both tolerate gaps: persistence holds the last finite value; seasonal naive walks back whole seasons
until it finds a finite value at the same phase, and uses persistence where none exists.
"""

from __future__ import annotations

import numpy as np

from balancer.forecast.base import BaseForecaster, last_finite, register, steps_per

DAY_S = 86400.0
WEEK_S = 7 * DAY_S


class Persistence(BaseForecaster):
    """Every future step equals the last observed value."""

    name = "persistence"

    def _fit(self, v: np.ndarray) -> None:
        self.level_ = last_finite(v)

    def _predict(self, horizon: int) -> np.ndarray:
        return np.full(horizon, self.level_)


def seasonal_naive_path(v: np.ndarray, period: int, horizon: int, max_back: int = 4) -> np.ndarray:
    """y[t+k] = y[t+k - j*period] for the smallest j >= ceil(k/period) with a finite value (vectorised)."""
    n = len(v)
    k = np.arange(1, horizon + 1)
    out = np.full(horizon, np.nan)
    first = (k + period - 1) // period
    for extra in range(max_back):
        src = n - 1 + k - (first + extra) * period
        ok = np.isnan(out) & (src >= 0)
        vals = np.where(ok, v[np.clip(src, 0, n - 1)], np.nan)
        out = np.where(np.isnan(out), vals, out)
    return np.where(np.isnan(out), last_finite(v), out)


class SeasonalNaive(BaseForecaster):
    """Every future step equals the value one season (`period_s`) earlier."""

    def __init__(self, period_s: float = DAY_S) -> None:
        self.period_s = period_s

    @property
    def name(self) -> str:  # type: ignore[override]
        return "seasonal_naive_weekly" if self.period_s >= WEEK_S else "seasonal_naive_daily"

    def _fit(self, v: np.ndarray) -> None:
        self.period_ = steps_per(self.step_s_, self.period_s)

    def _update(self, v: np.ndarray) -> None:
        self._fit(v)

    def _predict(self, horizon: int) -> np.ndarray:
        return seasonal_naive_path(self.y_, self.period_, horizon)


register("persistence")(Persistence)
register("seasonal_naive_daily")(lambda: SeasonalNaive(DAY_S))
register("seasonal_naive_weekly")(lambda: SeasonalNaive(WEEK_S))
