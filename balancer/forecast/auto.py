"""Automatic choice: a weighted ensemble of candidate models, weighted by their rolling-origin error.

For every horizon separately, the candidates' mean absolute errors over recent out-of-sample origins decide
the weights: the `top` best candidates get weights proportional to 1/MAE^2 (the best alone when `top` = 1).
Weights are recomputed whenever errors are re-measured, so the choice follows the data as it arrives: a
persistence-like model tends to win the first hour, seasonal ones the next day.

`ensemble_weights` is the pure rule, shared by the backtest (which measures the candidates' errors at past
origins for free) and by `Auto`, the stand-alone forecaster, whose `fit` runs a small rolling-origin backtest on
the last `select_days` of the training data only (candidates fitted on what precedes each origin), then refits
every candidate on all the data. A candidate that fails is served by persistence inside the ensemble (its
`Fallback`); the forecast's ``fallbacks`` names it and its error, so the controller logs and exports it.

Measured alternatives (the bench's stride-1 backtest, MAE / best naive at 1 h and 4 h, ServeGen m-small and
m-large; shipped: 0.842 / 0.846 and 1.000 / 0.919), none shipped:

* median of all candidates 0.834 / 0.839 and 1.013 / 0.918; all candidates at 1/MAE^2 0.851 / 0.838 and
  1.022 / 0.904; least-absolute-deviation stacking (non-negative weights summing to 1 per horizon, refitted
  hourly on three days of out-of-sample errors) 0.834 / 0.883 and 1.001 / 0.943, at +11-13 CPU s a trace.
* the GBM on a log target, on ratio-to-profile targets, or with deviation-from-profile features: within 0.01
  of the shipped figures either way.
* a direct linear median model per horizon (LAD on the typical-day profile at the target time, the current
  deviation from it, the last value and the same time yesterday, all over the trailing-day mean) as an extra
  candidate: 0.848 / 0.837 and 0.975 / 0.902, +6 CPU s a trace. The best of these, but a small gain.
* the ceiling of any fixed mix of the candidates, fitted in hindsight on the very points scored: 0.806 / 0.824
  and 0.962 / 0.857. No reweighting of these models reaches the issue's 0.80 at 4 h; m-large has no daily
  shape to exploit (level regimes of one to two days and bursts: trailing means over 30 min to 24 h score
  0.98-1.06 at 4 h).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from balancer.forecast.base import QUANTILES, BaseForecaster, Fallback, QuantileForecast, make, register

DAY_S = 86400.0
CANDIDATES = ("persistence", "seasonal_naive_daily", "seasonal_naive_weekly", "holt_winters", "mstl", "gbm",
              "profile")


def ensemble_weights(mae: np.ndarray, top: int = 3) -> np.ndarray:
    """mae: [models, horizons] (NaN = unknown) -> weights [models, horizons], each column summing to 1."""
    mae = np.asarray(mae, float)
    m, h = mae.shape
    bad = ~np.isfinite(mae)
    filled = np.where(bad, np.inf, np.maximum(mae, 1e-12))
    order = np.argsort(filled, axis=0)
    keep = np.zeros_like(filled, dtype=bool)
    np.put_along_axis(keep, order[: max(top, 1)], True, axis=0)
    keep &= ~bad
    inv = np.where(keep, 1.0 / np.where(np.isfinite(filled), filled, 1.0) ** 2, 0.0)
    total = inv.sum(axis=0)
    w = np.where(total > 0, inv / np.where(total > 0, total, 1.0), 0.0)
    none = total <= 0  # no error measured yet: equal weights
    w[:, none] = 1.0 / m
    return w


def combine(paths: list[dict[float, np.ndarray]], weights: np.ndarray) -> dict[float, np.ndarray]:
    """Weighted quantile averaging; `weights` [models, horizon] (per step)."""
    out = {}
    for q in paths[0]:
        stack = np.vstack([p[q] for p in paths])
        out[q] = (weights * stack).sum(axis=0)
    return out


def interp_weights(weights: np.ndarray, at_steps: np.ndarray, horizon: int) -> np.ndarray:
    """Weights measured at a few horizons -> weights for every step 1..horizon (nearest measured horizon)."""
    steps = np.arange(1, horizon + 1)
    pos = np.clip(np.searchsorted(at_steps, steps), 0, len(at_steps) - 1)
    left = np.clip(pos - 1, 0, len(at_steps) - 1)
    nearer = np.abs(at_steps[left] - steps) < np.abs(at_steps[pos] - steps)
    return weights[:, np.where(nearer, left, pos)]


class Auto(BaseForecaster):
    """Ensemble of `candidates` weighted per horizon by their error on the latest `select_days` of history."""

    name = "auto"

    def __init__(self, candidates: tuple[str, ...] = CANDIDATES, select_days: float = 2.0, top: int = 3,
                 select_stride_s: float = 3600.0, horizons_s: tuple[float, ...] = (600, 3600, 4 * 3600, DAY_S),
                 tz: str = "UTC") -> None:
        self.candidates = candidates
        self.select_days = select_days
        self.top = top
        self.select_stride_s = select_stride_s
        self.horizons_s = horizons_s
        self.tz = tz   # handed to every candidate with a calendar

    def _models(self) -> list[Fallback]:
        return [Fallback(make(c, self.tz)) for c in self.candidates]

    def _fit(self, v: np.ndarray) -> None:
        y = pd.Series(v, index=self.index_)
        step = self.step_s_
        self.at_ = np.array(sorted({max(int(round(s / step)), 1) for s in self.horizons_s}))
        sel = min(int(self.select_days * DAY_S / step), len(v) // 3)
        start = len(v) - sel
        stride = max(int(round(self.select_stride_s / step)), 1)
        origins = np.arange(start, len(v) - 1, stride)
        errs = np.full((len(self.candidates), len(self.at_)), np.nan)
        if sel >= 2 and len(origins):
            for i, model in enumerate(self._models()):
                abs_err = [[] for _ in self.at_]
                for j, o in enumerate(origins):
                    hist = y.iloc[: o + 1]
                    (model.fit if j == 0 else model.update)(hist)
                    path = model.predict(int(self.at_[-1])).quantiles[0.5]
                    for hi, h in enumerate(self.at_):
                        if o + h < len(v) and np.isfinite(v[o + h]):
                            abs_err[hi].append(abs(v[o + h] - path[h - 1]))
                errs[i] = [np.mean(e) if e else np.nan for e in abs_err]
        self.errors_ = errs
        self.weights_ = ensemble_weights(errs, self.top)
        self.models_ = [m.fit(y) for m in self._models()]

    def _update(self, v: np.ndarray) -> None:
        y = pd.Series(v, index=self.index_)
        for m in self.models_:
            m.update(y)

    def _predict(self, horizon: int) -> dict:
        paths, self.fallbacks_ = [], {}
        for m in self.models_:
            fc = m.predict(horizon)
            self.fallbacks_.update(fc.fallbacks)   # a failed candidate: persistence stands in for it
            paths.append({q: fc.quantiles[q] for q in QUANTILES} | {"mean": fc.mean})
        w = interp_weights(self.weights_, self.at_, horizon)
        return combine(paths, w)

    def predict(self, horizon: int) -> QuantileForecast:
        fc = super().predict(horizon)
        fc.fallbacks = dict(self.fallbacks_)
        return fc


register("auto")(Auto)
