"""The controller's forecaster: fed one observation per cycle, forecasts per service, tracks its own error.

`DemandForecaster` keeps, per service, demand averaged into fixed buckets of `step_s` (bucket b covers
[b*step, (b+1)*step) in epoch seconds). A bucket is final once time has moved past it. Each cycle:

* `update(service, t, value)` adds an observation (several per bucket are averaged);
* `forecast(service, now, horizon_steps)` closes the buckets before `now`, refits the model only when
  `refit_every` new buckets arrived since the last fit (otherwise a cheap `update`), predicts the buckets
  from the current one on, re-calibrates the quantiles on the residuals of its own past forecasts
  (`conformal.OnlineCalibrator`) and returns a frozen `balancer.model.Forecast` whose step 1 is the current
  bucket (``issued_at`` = start of the previous bucket);
* when a bucket closes, every stored forecast that covered it is scored: `rolling_error(service, horizon)`
  is the rolling MAE of the p50 divided by the mean demand (the ``gputide_forecast_error_ratio`` gauge).

History is cleaned like in the backtest (outages masked, bursts clipped) before fitting. Any model failure
falls back to persistence (`base.Fallback`), so the controller always gets a forecast, but never silently: when a
model (the configured one, or a candidate inside auto's ensemble) starts being served by persistence, a warning
names the service, the model, its error and the fallback, `fallback_starts` counts it per (service, model), and
`fallbacks()` lists the pairs served by persistence now (the ``gputide_forecast_fallback`` gauge); a model that
forecasts again after a refit is logged too and leaves `fallbacks()`. `timezone` (the policy's
`forecast.timezone`, an IANA name) is the local time models with a calendar read days and weeks in.

Within a bucket a forecast is computed once and served again (`reuse`): it reads only the closed buckets, the
model and the calibrator, none of which change until a bucket closes, so the nine other one-minute cycles of a
10-minute bucket repeated the same work (70% of a live loop's time). What is served again is the forecast of a call
that only updated the model (a refit's call is never reused: the next one updates the model on the same history),
and a model's update is a pure function of its fit and the history, so it is the forecast the call would have
computed; its side effects (the issued path, the fallbacks' log and count) are repeated. `reuse=False` computes
every call (tests compare the two).

A forecast is refused (`ShortHistory`, a `ValueError`) until the service has the history a tidal forecast needs:
`tide_history_s` of demand (the model's daily season, as many times as the model needs to fit it) plus the horizon
asked for, measured as the span from its first real bucket to its last (`covered_buckets`): a gap no longer than a
forecast may be issued across (`max_stale_steps` + 1, a cycle: with a cycle of 5 steps only 1 bucket in 5 gets a
sample) counts as covered, a longer outage does not. A forecast from an hour of night demand is flat, and the capacity
planner would lend the service's GPUs just before the morning rise (a new or renamed service, or any after Prometheus
lost its data). A forecast is refused too (`StaleDemand`) while the latest real bucket is more than `max_stale_steps`
old.
"""

from __future__ import annotations

import logging
import math
from collections import deque
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from balancer.config import check_timezone
from balancer.forecast.base import MODELS, Fallback, QuantileForecast, make
from balancer.forecast.conformal import OnlineCalibrator
from balancer.forecast.traces import clean_for_fit, parse_step

DAY_S = 86400.0
log = logging.getLogger(__name__)
# whole seasons a model must see before it forecasts with one: statsmodels fits Holt-Winters' season only from two
# full cycles, and MSTL keeps a period only below half the history (stats.py): with less both forecast no season at
# all. The others read the season straight back (seasonal naive, the profile's typical day, GBM's same time
# yesterday): one cycle
SEASONS_TO_FIT = {"holt_winters": 2, "mstl": 2}
DAILY_CALENDAR = ("profile", "gbm")   # models whose daily season is their calendar (no season attribute)
SEASONLESS_BUCKETS = 12   # the history a model with no season needs (persistence: a forecast from any history)


class ShortHistory(ValueError):
    """Not enough demand history for a forecast yet (the service is new, or its past was lost). `tide`: the history
    the model's daily season needs (`tide_history_s`) is what is missing, not a caller's fixed `min_history`."""

    def __init__(self, message: str, tide: bool = False) -> None:
        super().__init__(message)
        self.tide = tide


class StaleDemand(ValueError):
    """The service's latest real demand is older than a forecast may be issued from."""


def _season_s(model: object) -> float | None:
    """The shortest season `model` reads (seconds): its ``seasons_s``, ``season_s`` or ``period_s``, a day for the
    profile and GBM (their typical day, their same time yesterday); auto's, the shortest of its candidates'; None for a
    model that reads none (persistence)."""
    if hasattr(model, "candidates"):
        return min((s for c in model.candidates if (s := _season_s(MODELS[c]())) is not None), default=None)
    one = getattr(model, "season_s", None) or getattr(model, "period_s", None)
    seasons = getattr(model, "seasons_s", None) or ((one,) if one else ())
    if not seasons:
        return DAY_S if getattr(model, "name", "") in DAILY_CALENDAR else None
    return float(min(seasons))


def tide_history_s(model: str) -> float:
    """The demand history (seconds) `model` needs before its forecast may be trusted with the daily tide: its
    shortest season times the cycles it needs to fit one (`SEASONS_TO_FIT`); for auto, which blends its candidates,
    the most any of its candidates of that season needs. 0 for a model with no season (persistence), which
    forecasts no tide however long its history."""
    m = MODELS[model]()
    season = _season_s(m)
    if season is None:
        return 0.0
    names = [c for c in getattr(m, "candidates", ()) if _season_s(MODELS[c]()) == season] or [model]
    return season * max(SEASONS_TO_FIT.get(n, 1) for n in names)


@dataclass
class _Service:
    first: int | None = None  # bucket index of values[0]
    values: list = field(default_factory=list)
    open_bucket: int | None = None
    open_sum: float = 0.0
    open_n: int = 0
    model: Fallback | None = None
    fitted_at: int = -1  # number of closed buckets at the last fit
    issued: dict = field(default_factory=dict)  # bucket of step 1 -> p50 path
    issued_p90: dict = field(default_factory=dict)  # bucket of step 1 -> calibrated p90 path
    errors: dict = field(default_factory=dict)  # h -> deque of (abs error, truth)
    calibrator: OnlineCalibrator | None = None
    fallback_reason: str | None = None
    fallbacks: dict = field(default_factory=dict)  # model served by persistence in the last forecast -> its error
    version: int = 0  # bumped whenever a bucket closes (values, first, calibrator and issued paths change only then)
    reused: tuple | None = None  # (key, forecast, raw p50) of the last call that only updated the model


class DemandForecaster:
    """Per-service online forecaster for the reconcile loop (cheap per cycle, refits every N buckets)."""

    def __init__(self, model: str = "auto", step_s: float = 600.0, refit_every: int | None = None,
                 history_days: float = 28.0, error_window: int | None = None, min_history: int | None = None,
                 max_stale_steps: int = 3, timezone: str = "UTC", reuse: bool = True) -> None:
        if model not in MODELS:
            from balancer.errors import InputError

            raise InputError(None, "forecast.model", model, ", ".join(sorted(MODELS)))
        self.model = model
        self.timezone = check_timezone(timezone, "forecast.timezone")
        self.step_s = float(step_s)
        self.refit_every = refit_every or max(int(DAY_S / self.step_s), 1)
        self.history = int(history_days * DAY_S / self.step_s)
        self.error_window = error_window or 3 * max(int(DAY_S / self.step_s), 1)
        # finite buckets a forecast needs; None: `tide_history_s(model)` plus the horizon asked for
        self.min_history = min_history
        self.tide_s = tide_history_s(model)
        self.max_stale_steps = max_stale_steps   # a forecast needs a real bucket at most this many steps old
        self.reuse = reuse   # serve a bucket's forecast again until a bucket closes (module docstring)
        self._svc: dict[str, _Service] = {}
        self.fallback_starts: dict[tuple[str, str], int] = {}   # (service, model) -> times it began falling back

    # -- input ---------------------------------------------------------------------------------------------
    def _service(self, name: str) -> _Service:
        if name not in self._svc:
            self._svc[name] = _Service(calibrator=OnlineCalibrator(self.error_window))
        return self._svc[name]

    def update(self, service: str, t: float, value: float) -> None:
        """One observation of demand (req/s) at epoch time `t`."""
        s = self._service(service)
        b = int(math.floor(t / self.step_s))
        if s.open_bucket is not None and b < s.open_bucket:
            return  # late sample for a closed bucket: ignored
        if s.open_bucket is not None and b > s.open_bucket:
            self._close_until(s, b)
        s.open_bucket = b
        if value is not None and math.isfinite(value):
            s.open_sum += float(value)
            s.open_n += 1

    def observe_history(self, service_or_series, series: pd.Series | None = None) -> None:
        """Seed a service with past demand: `observe_history(service, series)` or `observe_history(series)`."""
        if series is None:
            service, series = "default", service_or_series
        else:
            service = service_or_series
        y = series.resample(parse_step(self.step_s), origin="epoch").mean()
        for ts, v in y.items():
            self.update(service, ts.timestamp(), float(v) if np.isfinite(v) else float("nan"))

    def _append(self, s: _Service, b: int, value: float) -> None:
        s.version += 1
        if s.first is None:
            s.first = b
        while s.first + len(s.values) < b:  # a gap: buckets nobody reported
            self._score(s, s.first + len(s.values), float("nan"))
            s.values.append(float("nan"))
        s.values.append(value)
        self._score(s, b, value)
        if len(s.values) > self.history + self.refit_every:
            drop = len(s.values) - self.history
            del s.values[:drop]
            s.first += drop
            s.fitted_at = -1  # indices moved: refit next time

    def _close_until(self, s: _Service, b: int) -> None:
        if s.open_bucket is not None and s.open_bucket < b:
            self._append(s, s.open_bucket, s.open_sum / s.open_n if s.open_n else float("nan"))
            s.open_bucket, s.open_sum, s.open_n = b, 0.0, 0

    def _score(self, s: _Service, b: int, truth: float) -> None:
        for b0 in list(s.issued):
            path = s.issued[b0]
            h = b - b0 + 1
            if h > len(path):
                del s.issued[b0]
                s.issued_p90.pop(b0, None)
            elif h >= 1 and np.isfinite(truth):
                s.calibrator.add(h, truth, path[h - 1])
                s.errors.setdefault(h, deque(maxlen=self.error_window)).append((abs(truth - path[h - 1]), truth))

    # -- output --------------------------------------------------------------------------------------------
    def _series(self, s: _Service) -> pd.Series:
        idx = pd.to_datetime((np.arange(len(s.values)) + s.first) * self.step_s, unit="s", utc=True)
        y = pd.Series(np.asarray(s.values, float), index=pd.DatetimeIndex(idx, freq=f"{int(self.step_s)}s"))
        return clean_for_fit(y)

    def forecast(self, service: str, now: float, horizon_steps: int):
        """Quantile forecast (a `balancer.model.Forecast`) for buckets now, now+1, ... (horizon_steps of them)."""
        s = self._service(service)
        b_now = int(math.floor(now / self.step_s))
        if s.open_bucket is not None and s.open_bucket < b_now:
            self._close_until(s, b_now)
        finite = np.flatnonzero(np.isfinite(np.asarray(s.values, float)))   # the real buckets, read once a cycle
        self._check_history(service, finite, int(horizon_steps))
        if b_now - (s.first + int(finite[-1])) > self.max_stale_steps + 1:
            # after a telemetry gap (the loop held still, feeding nothing) the history ends hours ago: a forecast
            # issued now would be that old one's, served as fresh; none until the buckets since are real again
            raise StaleDemand(f"demand for {service!r} last seen {b_now - s.first - int(finite[-1])} steps ago "
                              f"(at most {self.max_stale_steps + 1} of {self.step_s:g} s): no forecast until fresh "
                              "demand arrives")
        closed = len(s.values)
        refit = s.model is None or s.fitted_at < 0 or closed - s.fitted_at >= self.refit_every
        key = (s.version, b_now, int(horizon_steps), s.model)
        if self.reuse and not refit and s.reused is not None and s.reused[0] == key:
            fc, p50 = s.reused[1], s.reused[2]
            s.fallback_reason = fc.fallback_reason
            self._note_fallbacks(service, s, fc.fallbacks)
        else:
            fc, p50 = self._compute(service, s, b_now, int(horizon_steps), refit)
            s.reused = (key, fc, p50) if self.reuse and not refit else None
        s.issued[b_now] = np.asarray(p50, float)
        s.issued_p90[b_now] = np.asarray(fc.quantiles[0.9], float)
        return fc.to_model(service)

    def _compute(self, service: str, s: _Service, b_now: int, horizon_steps: int,
                 refit: bool) -> tuple[QuantileForecast, np.ndarray]:
        """Refit (`refit`) or update `service`'s model on its closed buckets, predict `horizon_steps` from bucket
        `b_now`, note its fallbacks and calibrate: (the calibrated forecast, the model's own p50)."""
        y = self._series(s)
        # buckets between the last closed one and now were never reported
        missing = b_now - (s.first + len(s.values))
        if missing > 0:
            ext = pd.date_range(y.index[-1], periods=missing + 1, freq=y.index.freq)[1:]
            y = pd.concat([y, pd.Series(np.nan, index=ext)])
            y.index.freq = pd.Timedelta(seconds=self.step_s)
        if refit:
            s.model = Fallback(make(self.model, self.timezone)).fit(y)
            s.fitted_at = len(s.values)
        else:
            s.model.update(y)
        fc = s.model.predict(horizon_steps)
        s.fallback_reason = fc.fallback_reason
        self._note_fallbacks(service, s, fc.fallbacks)
        p50 = fc.quantiles[0.5]
        fc.quantiles = s.calibrator.apply(p50, fc.quantiles)
        fc.quantiles[0.9] = np.maximum(fc.quantiles[0.9], p50)
        fc.quantiles[0.99] = np.maximum(fc.quantiles[0.99], fc.quantiles[0.9])
        return fc, p50

    def _check_history(self, service: str, finite: np.ndarray, horizon_steps: int) -> None:
        """Raise `ShortHistory` while `service`, whose real buckets are at the indices `finite`, has less history
        than a forecast needs: `min_history` finite buckets where given (`SEASONLESS_BUCKETS` for a model with no
        season), else its model's `tide_history_s` plus the horizon, covered (`covered_buckets`)."""
        if self.min_history is not None or not self.tide_s:
            have = int(finite.size)
            # no real bucket: no forecast
            need = max(self.min_history if self.min_history is not None else SEASONLESS_BUCKETS, 1)
            if have < need:
                raise ShortHistory(f"not enough history for {service!r}: need {need} buckets")
            return
        have = covered_buckets(finite, self.max_stale_steps + 1)
        need = math.ceil(self.tide_need_s(horizon_steps) / self.step_s)
        if have < need:
            raise ShortHistory(f"{service}: {_hours(have * self.step_s)} of demand history, a forecast needs "
                               f"{_hours(need * self.step_s)} ({_hours(self.tide_s)} of seasons for {self.model}, "
                               f"plus the {_hours(horizon_steps * self.step_s)} horizon)", tide=True)

    def tide_need_s(self, horizon_steps: int) -> float:
        """The demand history (seconds) a forecast `horizon_steps` ahead waits for: `tide_s` plus the horizon; 0 for
        a model with no season (persistence waits for `SEASONLESS_BUCKETS` buckets instead). `_check_history` holds
        a service to it, and `gputide run` warns at start of a --forecast-history shorter than it."""
        return self.tide_s and self.tide_s + horizon_steps * self.step_s

    def _note_fallbacks(self, service: str, s: _Service, now: dict[str, str]) -> None:
        """Log and count the models that began (or stopped) being served by persistence for `service`."""
        for model, why in now.items():
            if model not in s.fallbacks:
                self.fallback_starts[(service, model)] = self.fallback_starts.get((service, model), 0) + 1
                inside = "" if model == self.model else f" inside {self.model}"
                log.warning("forecast for %s: model %s failed (%s); persistence forecasts in its place%s",
                            service, model, why, inside)
        for model in s.fallbacks.keys() - now.keys():
            log.info("forecast for %s: model %s forecasts again (no persistence fallback)", service, model)
        s.fallbacks = dict(now)

    def fallbacks(self) -> dict[tuple[str, str], str]:
        """{(service, model): error} for every model whose latest forecast persistence served in its place."""
        return {(name, model): why for name, s in self._svc.items() for model, why in s.fallbacks.items()}

    def forecast_for(self, service: str, now: float, horizon: int | str) -> dict[float, float]:
        """What was forecast for the bucket holding `now` when it was `horizon` (steps, or a duration) ahead:
        {0.5: p50, 0.9: p90}, or {} when no forecast was issued then. Plotted against the demand observed now, it
        shows forecast and outcome aligned in time (the `gputide_forecast_for_now` gauge)."""
        if isinstance(horizon, str):
            horizon = max(int(round(parse_step(horizon).total_seconds() / self.step_s)), 1)
        s = self._svc.get(service)
        b0 = int(math.floor(now / self.step_s)) - int(horizon) + 1
        if s is None or b0 not in s.issued or len(s.issued[b0]) < horizon:
            return {}
        return {0.5: float(s.issued[b0][horizon - 1]), 0.9: float(s.issued_p90[b0][horizon - 1])}

    def fit_due(self, service: str, now: float) -> bool:
        """Whether `forecast(service, now, ...)` would (re)fit the model rather than only update it."""
        s = self._svc.get(service)
        if s is None or s.model is None or s.fitted_at < 0:
            return True
        closing = 1 if s.open_bucket is not None and s.open_bucket < int(math.floor(now / self.step_s)) else 0
        return len(s.values) + closing - s.fitted_at >= self.refit_every

    def rolling_error(self, service: str, horizon: int | str) -> float:
        """Rolling MAE of the p50 at `horizon` (steps, or a duration such as '1h') divided by mean demand."""
        if isinstance(horizon, str):
            horizon = max(int(round(parse_step(horizon).total_seconds() / self.step_s)), 1)
        s = self._svc.get(service)
        pairs = s.errors.get(int(horizon)) if s else None
        if not pairs:
            return float("nan")
        err, truth = np.asarray(pairs, float).T
        mean = truth.mean()
        return float(err.mean() / mean) if mean > 0 else float("nan")

    def services(self) -> list[str]:
        return sorted(self._svc)

    def forget(self, service: str) -> None:
        """Drop everything kept for `service` (its demand history, model, stored forecasts and errors)."""
        self._svc.pop(service, None)


def covered_buckets(finite: np.ndarray, max_gap: int) -> int:
    """Buckets of history covered by the real buckets at the (sorted) indices `finite`: from the first to the last,
    where a run of empty buckets between two real ones counts when they are at most `max_gap` steps apart (a cycle
    longer than the step fills one bucket in several; a forecast is issued across such a gap) and an outage longer
    than that does not."""
    if not finite.size:
        return 0
    apart = np.diff(finite)
    return int(1 + np.where(apart <= max_gap, apart, 1).sum())


def _hours(seconds: float) -> str:
    """`3600` -> `1 h`, `5400` -> `1.5 h`, `600` -> `0.17 h`."""
    return f"{seconds / 3600:.3g} h"
