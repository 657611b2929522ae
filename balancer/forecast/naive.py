"""Naive baselines: persistence (the last value) and seasonal naive (same time one day / one week ago).

They are the yardsticks every other model is scored against (MASE), the fallback when a model fails, and
useful forecasters in their own right: persistence is hard to beat a few minutes ahead, seasonal naive a day
ahead. Both tolerate gaps: persistence holds the last finite value; seasonal naive walks back whole seasons
until it finds a finite value at the same phase, and uses persistence where none exists.

Seasonal naive reads its seasons in the local time of `tz` (an IANA name, default UTC): the value at the same
local wall-clock time one day / one week earlier, so across a DST change "same time yesterday" is 23 or 25 hours
back and human-driven demand keeps its 09:00 peak at 09:00. In UTC (or any zone without DST) a season is a fixed
number of steps, exactly as before. A wall-clock time that did not exist on the earlier day (the hour skipped in
spring) reads the first instant after the gap; one that existed twice (the hour repeated in autumn) reads its first
occurrence.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from balancer.forecast.base import BaseForecaster, last_finite, local_wall, register, steps_per

DAY_S = 86400.0
WEEK_S = 7 * DAY_S


class Persistence(BaseForecaster):
    """Every future step equals the last observed value."""

    name = "persistence"

    def _fit(self, v: np.ndarray) -> None:
        self.level_ = last_finite(v)

    def _predict(self, horizon: int) -> np.ndarray:
        return np.full(horizon, self.level_)


def seasonal_naive_path(v: np.ndarray, period: int, horizon: int, max_back: int = 4,
                        back: np.ndarray | None = None) -> np.ndarray:
    """y[t+k] = y[t+k - back[j-1, k-1]] for the smallest j whose source lies in the past (back >= k), or, when that
    value is missing, for the next of `max_back` seasons with a finite one (vectorised). `back[j-1, k-1]`: steps
    from target k back to the same phase j seasons earlier; default j * period (a season of fixed length)."""
    n = len(v)
    k = np.arange(1, horizon + 1)
    if back is None:
        seasons = (horizon + period - 1) // period + max_back
        back = np.arange(1, seasons + 1)[:, None] * period + np.zeros(horizon, dtype=int)
    src = n - 1 + k - back                                           # [seasons, horizon]
    first = np.argmax(back >= k, axis=0)                             # the nearest season already observed
    out = np.full(horizon, np.nan)
    for extra in range(max_back):
        j = first + extra
        s = src[np.minimum(j, len(src) - 1), k - 1]
        ok = np.isnan(out) & (j < len(src)) & (s >= 0) & (s < n)
        vals = np.where(ok, v[np.clip(s, 0, n - 1)], np.nan)
        out = np.where(np.isnan(out), vals, out)
    return np.where(np.isnan(out), last_finite(v), out)


def local_back(targets: pd.DatetimeIndex, step_s: float, period_s: float, tz: str, seasons: int) -> np.ndarray:
    """Steps from each target back to the same local wall-clock time in `tz` j = 1..`seasons` periods earlier:
    [seasons, len(targets)]; j * period_s / step_s where no DST change lies between."""
    wall = local_wall(targets, tz)
    utc = targets.tz_localize("UTC") if targets.tz is None else targets.tz_convert("UTC")
    earlier = np.ones(len(targets), dtype=bool)   # a repeated wall-clock time: its first occurrence (DST)
    rows = []
    for j in range(1, seasons + 1):
        src = (wall - pd.Timedelta(seconds=j * period_s)).tz_localize(tz, ambiguous=earlier,
                                                                       nonexistent="shift_forward")
        rows.append(np.rint((utc - src.tz_convert("UTC")).total_seconds().to_numpy() / step_s).astype(int))
    return np.vstack(rows)


class SeasonalNaive(BaseForecaster):
    """Every future step equals the value one season (`period_s`) earlier, at the same local time in `tz`."""

    def __init__(self, period_s: float = DAY_S, tz: str = "UTC", max_back: int = 4) -> None:
        self.period_s = period_s
        self.tz = tz
        self.max_back = max_back

    @property
    def name(self) -> str:  # type: ignore[override]
        return "seasonal_naive_weekly" if self.period_s >= WEEK_S else "seasonal_naive_daily"

    def _fit(self, v: np.ndarray) -> None:
        self.period_ = steps_per(self.step_s_, self.period_s)

    def _update(self, v: np.ndarray) -> None:
        self._fit(v)

    def _predict(self, horizon: int) -> np.ndarray:
        back = None
        if self.tz != "UTC":
            # a local season may be an hour shorter: one more than a fixed one to reach past the horizon
            seasons = (horizon + self.period_ - 1) // self.period_ + self.max_back + 1
            back = local_back(self._future_index(horizon), self.step_s_, self.period_s, self.tz, seasons)
        return seasonal_naive_path(self.y_, self.period_, horizon, self.max_back, back)


register("persistence")(Persistence)
register("seasonal_naive_daily")(lambda: SeasonalNaive(DAY_S))
register("seasonal_naive_weekly")(lambda: SeasonalNaive(WEEK_S))
