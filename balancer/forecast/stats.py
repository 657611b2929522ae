"""statsmodels models: additive Holt-Winters (ETS with a daily season) and MSTL (daily + weekly seasons).

Both estimate their parameters with statsmodels at `fit` time, which is the costly part, and then run the cheap
exponential-smoothing recursions themselves in numpy/Python, so that `update` (called every controller cycle) only
filters the new observations with the fitted parameters:

* Holt-Winters (additive, damped trend): level l, trend b and a seasonal state s of one day;
  ``l_t = a (y_t - s_{t-m}) + (1-a)(l_{t-1} + phi b_{t-1})``, ``b_t = beta (l_t - l_{t-1}) + (1-beta) phi b_{t-1}``,
  ``s_t = g (y_t - l_t) + (1-g) s_{t-m}``.
* MSTL: statsmodels' MSTL splits the series into daily and (with two weeks or more) weekly seasonal components
  and a remainder; the seasonal components repeat their last cycle (as statsforecast's MSTL does) and the
  deseasonalised series is followed by a damped Holt filter whose parameters statsmodels estimates.
  MSTL's cost grows with points x longest period, so the decomposition runs on means of k steps, k the smallest
  that leaves the longest season at most `max_season_points` (168) points, and the seasons are interpolated back
  to every step; the Holt filter runs on every step. At the controller's default 300 s step with 28 days kept
  (daily + weekly seasons) that is 672 hourly means instead of 8064 points with a season of 2016.

Fit times (one fit, CPU seconds, on the shared 2-core development machine at load average 2-7; wall time was up
to twice that): Holt-Winters (two weeks kept) 0.3 s at 600 s steps, 0.5 s at 300 s; MSTL at 300 s steps 0.3 s with 7-10
days, 0.25-0.55 s with 15-28 days (decomposing every step instead took 0.5 s, 9 s and 15-17 s: a controller cycle that
refitted two services ran 46 s, past the loop's 30 s interval, and now 1.3-4.8 s wall including the calibration);
at 600 s steps 0.4 s up to 28 days (was 4.6 s at 28 days). The bench's 10-minute series with under two weeks
of history have only the daily season of 144 points and are decomposed at every step as before.

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


def coarse_grid(periods: list[int], n: int, max_points: int) -> tuple[int, list[int], list[int]]:
    """(k, fine periods, coarse periods): average k steps per bucket so the longest season has <= max_points.

    A period is kept only while it is under half the (coarse) series, as statsmodels' MSTL drops the others;
    dropping one can lower k, so this repeats until the choice is stable."""
    kept = sorted(p for p in periods if p > 1 and 2 * p < n)
    while kept:
        k = max(1, -(-max(kept) // max_points))
        coarse = [max(int(round(p / k)), 1) for p in kept]
        ok = [c > 1 and 2 * c < n // k for c in coarse]
        if all(ok):
            return k, kept, coarse
        kept = [p for p, good in zip(kept, ok, strict=True) if good]
    return 1, [], []


def _decompose(x: np.ndarray, periods: list[int], max_points: int) -> tuple[np.ndarray, np.ndarray, int]:
    """MSTL on x averaged to a coarse grid: (seasonal sum at every step of x, profile over the longest season, its
    length). Each component's last cycle repeats, interpolated back to the fine step; the profile's index 0 is the
    step right after x."""
    k, fine, coarse = coarse_grid(periods, len(x), max_points)
    if not fine:
        return np.zeros(len(x)), np.zeros(1), 1
    from statsmodels.tsa.seasonal import MSTL

    r = len(x) % k                                    # buckets end at the last step; the oldest r steps are left out
    xc = x[r:].reshape(-1, k).mean(axis=1)
    res = MSTL(xc, periods=tuple(coarse) if len(coarse) > 1 else coarse[0]).fit()
    seas = np.asarray(res.seasonal, float).reshape(len(xc), -1)
    # a bucket's mean stands for its centre step; fine step t sits at coarse position (t - r - (k-1)/2) / k. The
    # last half bucket lies past the last centre: it leans on the next bucket, one cycle after the last cycle's
    # first (held flat, a steep slope there would bend the remainder the Holt level ends on)
    at = (np.arange(len(x)) - r - (k - 1) / 2) / k
    total = np.zeros(len(x))
    big = max(fine)
    profile = np.zeros(big)
    for j, (p, c) in enumerate(zip(fine, coarse, strict=True)):
        total += np.interp(at, np.arange(len(xc) + 1), np.append(seas[:, j], seas[len(xc) - c, j]))
        u = (np.arange(p) - (k - 1) / 2) * c / p      # the fine cycle stretched onto the coarse one (c = p / k)
        cycle = np.interp(u, np.arange(c), seas[len(xc) - c:, j], period=c)
        profile += cycle[np.arange(big) % p]
    return total, profile, big


class MSTLModel(BaseForecaster):
    """statsmodels MSTL decomposition (daily, and weekly once two weeks exist) + damped Holt on the rest.

    The decomposition runs on means of k steps, k the smallest that leaves at most `max_season_points` points in
    the longest season (5-minute steps: k = 12, hourly means, once the weekly season is in); the Holt filter runs on
    every step."""

    name = "mstl"

    def __init__(self, seasons_s: tuple[float, ...] = (DAY_S, 7 * DAY_S), max_days: float = 28.0,
                 max_season_points: int = 168) -> None:
        self.seasons_s = seasons_s
        self.max_days = max_days
        self.max_season_points = max_season_points

    def _fit(self, v: np.ndarray) -> None:
        from statsmodels.tsa.holtwinters import ExponentialSmoothing

        keep = min(len(v), int(self.max_days * DAY_S / self.step_s_))
        periods = [steps_per(self.step_s_, s) for s in self.seasons_s]
        x = fill_gaps(v[-keep:], steps_per(self.step_s_, min(self.seasons_s, default=DAY_S)))
        seasonal, profile, big = _decompose(x, periods, self.max_season_points)
        rest = x - seasonal
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
