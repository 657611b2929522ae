"""statsmodels models: additive Holt-Winters (ETS with a daily season) and MSTL (daily + weekly seasons).

Both estimate their parameters with statsmodels at `fit` time, which is the costly part (0.1-0.5 s on two
weeks of 10-minute data), and then run the cheap exponential-smoothing recursions themselves in numpy/Python,
so that `update` (called every controller cycle) only filters the new observations with the fitted parameters:

* Holt-Winters (additive, damped trend): level l, trend b and a seasonal state s of one day;
  ``l_t = a (y_t - s_{t-m}) + (1-a)(l_{t-1} + phi b_{t-1})``, ``b_t = beta (l_t - l_{t-1}) + (1-beta) phi b_{t-1}``,
  ``s_t = g (y_t - l_t) + (1-g) s_{t-m}``.
* MSTL: statsmodels' MSTL splits the series into daily and (with two weeks or more) weekly seasonal components
  and a remainder; the seasonal components repeat their last cycle (as statsforecast's MSTL does) and the
  deseasonalised series is followed by a damped Holt filter whose parameters statsmodels estimates.

Both seasons are fixed numbers of steps (statsmodels needs a constant period), so neither model honours a DST
change: they have no time zone (`base.make` leaves them alone), and after a change their daily shape is one hour
off in local wall-clock time until the season state re-learns it (Holt-Winters, through gamma) or the next refit's
decomposition sees enough days at the new offset (MSTL).

Gaps (NaN) are filled before statsmodels sees them (same time yesterday, else linear interpolation); during
filtering a missing observation just advances the state without a correction.
"""

from __future__ import annotations

import warnings

import numpy as np
import pandas as pd

from balancer.forecast.base import BaseForecaster, register, steps_per

DAY_S = 86400.0


def fill_gaps(v: np.ndarray, period: int) -> np.ndarray:
    """NaN -> value one period earlier where known, else linear interpolation (edges held)."""
    out = v.astype(float).copy()
    for _ in range(2):
        miss = np.flatnonzero(np.isnan(out))
        src = miss - period
        ok = src >= 0
        out[miss[ok]] = out[src[ok]]
    if np.isnan(out).any():
        out = pd.Series(out).interpolate(limit_direction="both").to_numpy()
    return np.nan_to_num(out, nan=0.0)


def holt_filter(x: np.ndarray, alpha: float, beta: float, phi: float, level: float, trend: float,
                season: np.ndarray | None = None, gamma: float = 0.0, phase: int = 0) -> tuple[float, float, int]:
    """Run a damped (seasonal) Holt recursion over x from (level, trend); updates `season` in place."""
    m = len(season) if season is not None else 0
    for xi in x:
        s = season[phase % m] if m else 0.0
        prev = level
        if np.isfinite(xi):
            level = alpha * (xi - s) + (1 - alpha) * (prev + phi * trend)
            trend = beta * (level - prev) + (1 - beta) * phi * trend
            if m:
                season[phase % m] = gamma * (xi - level) + (1 - gamma) * s
        else:
            level = prev + phi * trend
            trend = phi * trend
        phase += 1
    return level, trend, phase


def damped_steps(phi: float, horizon: int) -> np.ndarray:
    return np.cumsum(phi ** np.arange(1, horizon + 1))


class HoltWinters(BaseForecaster):
    """Additive Holt-Winters with a damped trend and a daily season (statsmodels ExponentialSmoothing)."""

    name = "holt_winters"

    def __init__(self, season_s: float = DAY_S, max_days: float = 14.0) -> None:
        self.season_s = season_s
        self.max_days = max_days

    def _fit(self, v: np.ndarray) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        m = steps_per(self.step_s_, self.season_s)
        keep = min(len(v), int(self.max_days * DAY_S / self.step_s_))
        x = fill_gaps(v[-keep:], m)
        seasonal = "add" if len(x) >= 2 * m else None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = ExponentialSmoothing(x, trend="add", damped_trend=True, seasonal=seasonal,
                                       seasonal_periods=m if seasonal else None,
                                       initialization_method="heuristic").fit()
        p = res.params
        self.alpha_, self.beta_ = float(p["smoothing_level"]), float(p["smoothing_trend"])
        self.gamma_, self.phi_ = float(p.get("smoothing_seasonal") or 0.0), float(p["damping_trend"])
        self.m_ = m if seasonal else 0
        season = np.asarray(res.season[-m:], float).copy() if seasonal else None
        self.state_ = (float(res.level[-1]), float(res.trend[-1]), season, len(v))
        self._update(v)

    def _update(self, v: np.ndarray) -> None:
        level, trend, season, n_fit = self.state_
        season = None if season is None else season.copy()
        # the fitted season array is aligned so that index 0 is the phase right after the fit end
        level, trend, phase = holt_filter(v[n_fit:], self.alpha_, self.beta_, self.phi_, level, trend,
                                          season, self.gamma_, 0)
        self.now_ = (level, trend, season, phase)

    def _predict(self, horizon: int) -> np.ndarray:
        level, trend, season, phase = self.now_
        path = level + trend * damped_steps(self.phi_, horizon)
        if season is not None:
            path = path + season[(phase + np.arange(horizon)) % self.m_]
        return path


class MSTLModel(BaseForecaster):
    """statsmodels MSTL decomposition (daily, and weekly once two weeks exist) + damped Holt on the rest."""

    name = "mstl"

    def __init__(self, seasons_s: tuple[float, ...] = (DAY_S, 7 * DAY_S), max_days: float = 28.0) -> None:
        self.seasons_s = seasons_s
        self.max_days = max_days

    def _fit(self, v: np.ndarray) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing
        from statsmodels.tsa.seasonal import MSTL

        keep = min(len(v), int(self.max_days * DAY_S / self.step_s_))
        periods = [steps_per(self.step_s_, s) for s in self.seasons_s]
        periods = tuple(p for p in periods if 2 * p < keep and p > 1)   # MSTL drops p >= nobs / 2
        day = periods[0] if periods else steps_per(self.step_s_, DAY_S)
        x = fill_gaps(v[-keep:], day)
        if periods:
            res = MSTL(x, periods=periods if len(periods) > 1 else periods[0]).fit()
            seas = np.asarray(res.seasonal, float).reshape(len(x), -1)
            # each component repeats its last cycle; the sum is one profile over the longest period
            big = max(periods)
            idx = np.arange(big)
            profile = sum(seas[len(x) - p + (idx % p), j] for j, p in enumerate(periods))
        else:
            seas, big, profile = np.zeros((len(x), 1)), 1, np.zeros(1)
        rest = x - seas.sum(axis=1)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res2 = ExponentialSmoothing(rest, trend="add", damped_trend=True).fit()
        p = res2.params
        self.alpha_, self.beta_, self.phi_ = (float(p["smoothing_level"]), float(p["smoothing_trend"]),
                                              float(p["damping_trend"]))
        self.profile_, self.period_ = np.asarray(profile, float), big
        self.state_ = (float(res2.level[-1]), float(res2.trend[-1]), len(v))
        self._update(v)

    def _update(self, v: np.ndarray) -> None:
        level, trend, n_fit = self.state_
        new = v[n_fit:]
        desea = new - self.profile_[np.arange(len(new)) % self.period_]
        level, trend, _ = holt_filter(desea, self.alpha_, self.beta_, self.phi_, level, trend)
        self.now_ = (level, trend, len(new))

    def _predict(self, horizon: int) -> np.ndarray:
        level, trend, done = self.now_
        seas = self.profile_[(done + np.arange(horizon)) % self.period_]
        return level + trend * damped_steps(self.phi_, horizon) + seas


register("holt_winters")(HoltWinters)
register("mstl")(MSTLModel)
