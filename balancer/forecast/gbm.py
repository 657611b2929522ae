"""Quantile gradient boosting (scikit-learn HistGradientBoostingRegressor, quantile loss), one model per quantile.

One *direct* multi-horizon model: every training row is (origin t, steps ahead k) and the target is the demand
at t+k. Features are taken at the origin only, so nothing from the future leaks in:

* ``k`` and the calendar of the target time (hour of day, day of week) in the local time of `tz` (an IANA name,
  default UTC; `base.make(name, tz)` sets it), so a 09:00 peak is hour 9 on both sides of a DST change;
* the recent level: last value, trailing 1-hour and 6-hour means;
* the seasonal lags of the target time: same time yesterday (raw and smoothed) and same time last week (NaN
  when that is still in the future or unknown; HistGradientBoosting routes NaN natively). These are fixed
  1-day / 7-day step counts, not wall-clock: across a DST change they are an hour off, which the local hour
  feature lets the trees correct only in part;
* the change since yesterday at the origin (level now minus level one day earlier).

All levels are divided by the trailing one-day mean at the origin, so the trees learn shapes, not absolute
volumes; forecasts are multiplied back. Training rows use a grid of horizons (1 step to one day) and every
`stride`-th origin; prediction evaluates every step 1..h. `update` only refreshes the history used for
features; the trees are re-grown at `fit`.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd
from threadpoolctl import ThreadpoolController

from balancer.forecast.base import BaseForecaster, register, steps_per

DAY_S = 86400.0
HORIZON_GRID_S = (600, 1200, 1800, 3600, 7200, 10800, 14400, 21600, 28800, 43200, 64800, 86400)


_THREADS: list[ThreadpoolController] = []


def _one_thread():
    """OpenMP limited to one thread: on data this small, threads only add contention (scanned once, reused)."""
    if not _THREADS:
        _THREADS.append(ThreadpoolController())
    return _THREADS[0].limit(limits=1, user_api="openmp")


def _trailing_mean(v: np.ndarray, w: int) -> np.ndarray:
    """nanmean of v[i-w+1..i] for every i (vectorised with cumulative sums)."""
    ok = np.isfinite(v)
    c = np.concatenate([[0.0], np.cumsum(np.where(ok, v, 0.0))])
    n = np.concatenate([[0], np.cumsum(ok)])
    i = np.arange(len(v))
    lo = np.maximum(i - w + 1, 0)
    cnt = n[i + 1] - n[lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(cnt > 0, (c[i + 1] - c[lo]) / np.maximum(cnt, 1), np.nan)


def _ffill(v: np.ndarray) -> np.ndarray:
    idx = np.where(np.isfinite(v), np.arange(len(v)), 0)
    np.maximum.accumulate(idx, out=idx)
    out = v[idx]
    return out


class QuantileGBM(BaseForecaster):
    """Direct multi-horizon quantile GBM on lag, seasonal-lag and calendar features."""

    name = "gbm"

    def __init__(self, quantiles: tuple[float, ...] = (0.5, 0.9), max_horizon_s: float = DAY_S, stride: int = 2,
                 max_iter: int = 80, learning_rate: float = 0.08, max_leaf_nodes: int = 15,
                 min_samples_leaf: int = 40, tz: str = "UTC", max_days: float = 28.0, seed: int = 0) -> None:
        self.quantiles = quantiles
        self.max_horizon_s = max_horizon_s
        self.stride = stride
        self.max_iter = max_iter
        self.learning_rate = learning_rate
        self.max_leaf_nodes = max_leaf_nodes
        self.min_samples_leaf = min_samples_leaf
        self.tz = tz
        self.max_days = max_days
        self.seed = seed

    # -- features ------------------------------------------------------------------------------------------
    def _prepare(self, v: np.ndarray) -> None:
        step = self.step_s_
        self.day_ = steps_per(step, DAY_S)
        self.hour_ = steps_per(step, 3600.0)
        self.v_ = v
        self.last_ = _ffill(v)
        self.m1_ = _trailing_mean(v, self.hour_)
        self.m6_ = _trailing_mean(v, 6 * self.hour_)
        self.scale_ = _trailing_mean(v, self.day_)
        # the typical day: mean over the last 7 days of the hourly mean at the same phase (causal)
        days = [np.concatenate([np.full(i * self.day_, np.nan), self.m1_[: len(v) - i * self.day_]])
                for i in range(7) if i * self.day_ < len(v)]
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            self.prof_ = np.nanmean(np.vstack(days), axis=0)
            days6 = [np.concatenate([np.full(i * self.day_, np.nan), self.m6_[: len(v) - i * self.day_]])
                     for i in range(1, 8) if i * self.day_ < len(v)]
            self.prof6_ = np.nanmean(np.vstack(days6), axis=0) if days6 else np.full(len(v), np.nan)

    def _features(self, t: np.ndarray, k: np.ndarray, times: pd.DatetimeIndex) -> np.ndarray:
        """Rows for origins t (indices into the history) and steps ahead k; `times` = target timestamps."""
        v, d = self.v_, self.day_
        n = len(v)
        scale = self.scale_[t]
        scale = np.where(np.isfinite(scale) & (scale > 0), scale, 1.0)

        def lag(j: np.ndarray, src: np.ndarray) -> np.ndarray:
            ok = (j >= 0) & (j <= t) & (j < n)
            return np.where(ok, src[np.clip(j, 0, n - 1)], np.nan) / scale

        local = times.tz_convert(self.tz)
        tod = (local.hour.to_numpy() * 3600 + local.minute.to_numpy() * 60) / 3600.0
        yday = t + k - d * ((k + d - 1) // d)
        cols = [
            k.astype(float), tod, local.day_of_week.to_numpy().astype(float),
            self.last_[t] / scale, self.m1_[t] / scale, self.m6_[t] / scale,
            lag(yday, v), lag(np.minimum(yday + self.hour_ // 2, t), self.m1_),
            lag(t + k - 7 * d, v),
            lag(yday + self.hour_ // 2, self.prof_) if self.prof_ is not None else np.full(len(t), np.nan),
            self.m6_[t] / np.where(self.prof6_[t] > 0, self.prof6_[t], np.nan),
            (self.m1_[t] - np.where(t - d >= 0, self.m1_[np.clip(t - d, 0, n - 1)], np.nan)) / scale,
        ]
        return np.column_stack(cols), scale

    # -- fit / update / predict ----------------------------------------------------------------------------
    def _fit(self, v: np.ndarray) -> None:
        from sklearn.ensemble import HistGradientBoostingRegressor

        keep = min(len(v), int(self.max_days * DAY_S / self.step_s_))
        self._prepare(v)
        off = len(v) - keep
        self.max_h_ = steps_per(self.step_s_, self.max_horizon_s)
        grid = sorted({steps_per(self.step_s_, s) for s in HORIZON_GRID_S if s <= self.max_horizon_s} | {1})
        origins = np.arange(off + self.hour_, len(v) - 1, self.stride)
        t = np.repeat(origins, len(grid))
        k = np.tile(np.asarray(grid), len(origins))
        ok = (t + k < len(v))
        t, k = t[ok], k[ok]
        target = v[t + k]
        ok = np.isfinite(target)
        t, k, target = t[ok], k[ok], target[ok]
        if len(t) < 50:
            raise ValueError(f"too little history for the GBM: {len(t)} training rows")
        times = self.index_[t + k]
        X, scale = self._features(t, k, times)
        y = target / scale
        self.cols_ = np.isfinite(X).any(axis=0)  # e.g. last week's lag before a week of history exists
        X = X[:, self.cols_]
        self.models_ = {}
        for q in self.quantiles:
            m = HistGradientBoostingRegressor(loss="quantile", quantile=q, max_iter=self.max_iter,
                                              learning_rate=self.learning_rate, max_leaf_nodes=self.max_leaf_nodes,
                                              min_samples_leaf=self.min_samples_leaf, random_state=self.seed)
            with _one_thread():
                self.models_[q] = m.fit(X, y)

    def _update(self, v: np.ndarray) -> None:
        self._prepare(v)

    def _predict(self, horizon: int) -> dict:
        n = len(self.v_)
        k = np.arange(1, horizon + 1)
        t = np.full(horizon, n - 1)
        X, scale = self._features(t, k, self._future_index(horizon))
        X[:, 0] = np.minimum(k, self.max_h_)
        X = X[:, self.cols_]
        with _one_thread():
            return {q: m.predict(X) * scale for q, m in self.models_.items()}


register("gbm")(QuantileGBM)
