"""Typical-day profile plus a decaying deviation: the tide as it usually runs, corrected by how today differs.

A tidal service repeats its day, but each day is a bit higher or lower than usual, and the difference
persists for a while. The model says exactly that:

    y[t+k] = profile(phase(t+k)) + beta_k * dev_t,    dev_t = mean over the last hour of (y - profile)

* ``profile`` is the per-phase median of the last `days` days (each day first smoothed with a centred
  `smooth_s` moving mean, which is honest because all of it lies in the past), so one burst or outage does not
  dent it; with two weeks or more of history a weekly profile is used instead when `weekly` is set.
* ``beta_k`` is estimated per horizon k by least squares on the history (``sum(dev_t * d_{t+k}) / sum(dev_t^2)``,
  clipped to [0, 1]): how much of today's deviation typically survives k steps. It is near 1 for the next
  minutes and decays to what the data say over hours; no decay rate is assumed.

`update` keeps profile and betas and only recomputes the current deviation, so it costs microseconds.

Phases are read in the local time of `tz` (an IANA name, default UTC): across a DST change the 09:00 slot of the
typical day stays at 09:00 local time. A slot skipped in spring is interpolated from its neighbours; the hour
repeated in autumn feeds its slots twice.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from balancer.forecast.base import BaseForecaster, local_wall, register, steps_per

DAY_S = 86400.0


class TidalProfile(BaseForecaster):
    """Median typical day (or week) + per-horizon least-squares decay of the current deviation."""

    name = "profile"

    def __init__(self, days: int = 7, smooth_s: float = 3600.0, dev_s: float = 3600.0,
                 max_horizon_s: float = 2 * DAY_S, weekly: bool = False, tz: str = "UTC") -> None:
        self.days = days
        self.smooth_s = smooth_s
        self.dev_s = dev_s
        self.max_horizon_s = max_horizon_s
        self.weekly = weekly
        self.tz = tz

    def _phase(self, index: pd.DatetimeIndex) -> np.ndarray:
        if self.tz != "UTC":   # local wall-clock seconds since the epoch
            index = local_wall(index, self.tz)
        slot = index.as_unit("s").asi8 // int(round(self.step_s_))
        return (slot % self.period_).astype(int)

    def _deviation(self, v: np.ndarray) -> np.ndarray:
        dev = v - self.profile_[self._phase(self.index_)]
        w = steps_per(self.step_s_, self.dev_s)
        return pd.Series(dev).rolling(w, min_periods=1).mean().to_numpy()

    def _fit(self, v: np.ndarray) -> None:
        day = steps_per(self.step_s_, DAY_S)
        self.period_ = 7 * day if (self.weekly and len(v) >= 14 * day) else day
        sm = pd.Series(v).rolling(steps_per(self.step_s_, self.smooth_s), center=True, min_periods=1).mean()
        sm = sm.to_numpy()
        keep = min(len(v), self.days * day if self.period_ == day else 4 * self.period_)
        phase = self._phase(self.index_)[-keep:]
        frame = pd.DataFrame({"phase": phase, "v": sm[-keep:]})
        prof = frame.groupby("phase")["v"].median().reindex(range(self.period_))
        prof = prof.interpolate(limit_direction="both").fillna(np.nanmedian(v) if np.isfinite(v).any() else 0.0)
        self.profile_ = prof.to_numpy(float)
        raw = v - self.profile_[self._phase(self.index_)]
        dev = self._deviation(v)
        hmax = steps_per(self.step_s_, self.max_horizon_s)
        betas = np.zeros(hmax)
        for k in range(1, hmax + 1):
            a, b = dev[:-k], raw[k:]
            ok = np.isfinite(a) & np.isfinite(b)
            den = float(np.sum(a[ok] ** 2))
            betas[k - 1] = np.clip(np.sum(a[ok] * b[ok]) / den, 0.0, 1.0) if den > 0 and ok.sum() > 10 else 0.0
        self.beta_ = betas
        self._update(v)

    def _update(self, v: np.ndarray) -> None:
        dev = self._deviation(v)
        finite = np.flatnonzero(np.isfinite(dev))
        self.dev_ = float(dev[finite[-1]]) if finite.size else 0.0

    def _predict(self, horizon: int) -> np.ndarray:
        future = self._phase(self._future_index(horizon))
        beta = self.beta_[np.minimum(np.arange(horizon), len(self.beta_) - 1)]
        return self.profile_[future] + beta * self.dev_


register("profile")(TidalProfile)
