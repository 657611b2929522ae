"""The Forecaster protocol, the quantile forecast it returns, the model registry and the naive fallback.

A forecaster follows the statsforecast / sktime contract:

* ``__init__`` stores hyperparameters only;
* ``fit(y) -> self`` estimates parameters on a regular pandas Series (NaN = missing) and keeps the fitted
  state in attributes ending in ``_``;
* ``update(y) -> self`` conditions the fitted model on a longer history (``y`` extends the fit data) *without*
  re-estimating parameters; it is what a controller calls every cycle between (rare, costly) refits;
* ``predict(horizon) -> QuantileForecast`` for steps 1..horizon after the last observation, with the mean and at
  least the quantiles 0.5, 0.9 and 0.99.

`BaseForecaster` does the bookkeeping (index, step, last timestamp) so a model only writes ``_fit``,
``_update`` and ``_predict``. Quantiles a model cannot produce itself come from a rough residual spread; the
backtest and the online forecaster re-calibrate all of them on out-of-sample residuals (see `conformal`).

`Fallback` wraps any model: if it raises or returns non-finite values, a persistence forecast is served
instead and ``reason_`` says why; the forecast's ``fallbacks`` names every model so replaced (the wrapped one or,
for auto, its candidates) with its error, so a caller can log and count them (`online`). `MODELS` maps a name to a
zero-argument factory; every entry is covered by the conformance test in tests/forecast. `make(name, tz)` builds one for
a time zone: a model with a calendar (an attribute ``tz``: seasonal naive, GBM, profile, auto) reads days and weeks in
that zone's local time; the others have none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

import numpy as np
import pandas as pd

QUANTILES = (0.5, 0.9, 0.99)
_Z = {0.5: 0.0, 0.9: 1.2816, 0.99: 2.3263}


@dataclass
class QuantileForecast:
    """Demand for steps 1..h after the last observation: the mean and one array per quantile."""

    start: pd.Timestamp  # time of step 1
    step_s: float
    mean: np.ndarray
    quantiles: dict[float, np.ndarray]
    model: str = ""
    fallback_reason: str | None = field(default=None)
    # every model that failed while making this forecast and is served by persistence instead -> why: the model
    # itself, or candidates inside it (auto's ensemble keeps going on the others plus persistence in their place)
    fallbacks: dict[str, str] = field(default_factory=dict)

    @property
    def horizon(self) -> int:
        return len(self.mean)

    @property
    def index(self) -> pd.DatetimeIndex:
        return pd.date_range(self.start, periods=self.horizon, freq=pd.Timedelta(seconds=self.step_s))

    def to_model(self, service: str):
        """The controller's frozen `balancer.model.Forecast` (issued one step before step 1)."""
        from balancer.model import Forecast

        issued = self.start.timestamp() - self.step_s
        return Forecast(service=service, issued_at=issued, step_s=self.step_s,
                        quantiles={q: np.maximum(a, 0.0) for q, a in self.quantiles.items()})


@runtime_checkable
class Forecaster(Protocol):
    def fit(self, y: pd.Series) -> Forecaster: ...

    def update(self, y: pd.Series) -> Forecaster: ...

    def predict(self, horizon: int) -> QuantileForecast: ...


def epoch_ns(index: pd.DatetimeIndex) -> np.ndarray:
    """Nanoseconds since the epoch, whatever the index's resolution (pandas 3 defaults to microseconds)."""
    return index.as_unit("ns").asi8


def local_wall(times: pd.DatetimeIndex, tz: str) -> pd.DatetimeIndex:
    """Local wall-clock times in `tz`, tz-naive (a tz-naive `times` is read as UTC)."""
    aware = times.tz_localize("UTC") if times.tz is None else times
    return aware.tz_convert(tz).tz_localize(None)


def step_of(y: pd.Series) -> float:
    if not isinstance(y.index, pd.DatetimeIndex):
        raise TypeError("a forecaster needs a DatetimeIndex")
    if y.index.freq is not None:
        return pd.Timedelta(y.index.freq).total_seconds()
    if len(y) < 2:
        raise ValueError("a forecaster needs at least two observations")
    return float(np.median(np.diff(epoch_ns(y.index)))) / 1e9


def steps_per(y_step_s: float, period_s: float) -> int:
    return max(int(round(period_s / y_step_s)), 1)


class BaseForecaster:
    """Bookkeeping shared by all models; subclasses implement `_fit`, `_predict` and optionally `_update`."""

    name = "base"

    def fit(self, y: pd.Series) -> BaseForecaster:
        self._remember(y)
        v = self.y_
        finite = v[np.isfinite(v)]
        diffs = np.diff(v)
        diffs = diffs[np.isfinite(diffs)]
        mad = np.median(np.abs(diffs - np.median(diffs))) if diffs.size else 0.0
        spread = finite.std() if finite.size > 1 else 0.0
        self.noise_ = float(min(1.4826 * mad / np.sqrt(2.0), spread)) if diffs.size else 0.0
        self.spread_ = float(spread)
        self._fit(v)
        return self

    def update(self, y: pd.Series) -> BaseForecaster:
        if not hasattr(self, "y_"):
            return self.fit(y)
        self._remember(y)
        self._update(self.y_)
        return self

    def predict(self, horizon: int) -> QuantileForecast:
        if horizon < 1:
            raise ValueError(f"horizon must be >= 1, got {horizon}")
        out = self._predict(int(horizon))
        qs = dict(out) if isinstance(out, dict) else {0.5: np.asarray(out, float)}
        median = np.asarray(qs[0.5], float)
        for q in QUANTILES:
            if q not in qs:
                width = self.noise_ * np.sqrt(np.arange(1, horizon + 1, dtype=float))
                qs[q] = median + _Z[q] * np.minimum(width, self.spread_)
        mean = np.asarray(qs.pop("mean", median), float)
        qs = {float(q): np.asarray(a, float) for q, a in sorted(qs.items())}
        _monotone(qs)
        start = self.last_ts_ + pd.Timedelta(seconds=self.step_s_)
        return QuantileForecast(start=start, step_s=self.step_s_, mean=mean, quantiles=qs, model=self.name)

    # -- to implement --------------------------------------------------------------------------------------
    def _fit(self, v: np.ndarray) -> None:
        raise NotImplementedError

    def _update(self, v: np.ndarray) -> None:
        self._fit(v)

    def _predict(self, horizon: int) -> np.ndarray | dict:
        raise NotImplementedError

    # -- helpers -------------------------------------------------------------------------------------------
    def _remember(self, y: pd.Series) -> None:
        self.step_s_ = step_of(y)
        self.last_ts_ = y.index[-1]
        self.index_ = y.index
        self.y_ = y.to_numpy(float)

    def _future_index(self, horizon: int) -> pd.DatetimeIndex:
        return pd.date_range(self.last_ts_ + pd.Timedelta(seconds=self.step_s_), periods=horizon,
                             freq=pd.Timedelta(seconds=self.step_s_))


def _monotone(qs: dict[float, np.ndarray]) -> None:
    """Quantile arrays must not cross: sort each step across levels."""
    levels = sorted(qs)
    stack = np.sort(np.vstack([qs[q] for q in levels]), axis=0)
    for i, q in enumerate(levels):
        qs[q] = stack[i]


def last_finite(v: np.ndarray, default: float = 0.0) -> float:
    idx = np.flatnonzero(np.isfinite(v))
    return float(v[idx[-1]]) if idx.size else default


MODELS: dict[str, Callable[[], Forecaster]] = {}


def register(name: str) -> Callable[[Callable[[], Forecaster]], Callable[[], Forecaster]]:
    def deco(factory: Callable[[], Forecaster]) -> Callable[[], Forecaster]:
        MODELS[name] = factory
        return factory

    return deco


def make(name: str, tz: str = "UTC") -> Forecaster:
    """A fresh `MODELS[name]`, reading its calendar (if it has one) in the local time of the IANA zone `tz`."""
    model = MODELS[name]()
    if hasattr(model, "tz"):
        model.tz = tz
    return model


class Fallback:
    """Serve `model`, or a persistence forecast when it raises or returns non-finite values (`reason_` says why)."""

    def __init__(self, model: Forecaster, fallback: Callable[[], Forecaster] | None = None) -> None:
        self.model = model
        self.fallback = fallback

    def _backup(self) -> Forecaster:
        if self.fallback is not None:
            return self.fallback()
        from balancer.forecast.naive import Persistence

        return Persistence()

    def _fail(self, what: str, exc: BaseException | str) -> None:
        self.reason_ = f"{type(self.model).__name__}.{what}: {exc}"
        self.backup_ = self._backup().fit(self.y_)

    def fit(self, y: pd.Series) -> Fallback:
        self.y_, self.reason_, self.backup_ = y, None, None
        try:
            self.model.fit(y)
        except Exception as exc:  # any model failure must not stop the controller
            self._fail("fit", exc)
        return self

    def update(self, y: pd.Series) -> Fallback:
        self.y_ = y
        try:
            if self.backup_ is not None:
                self.backup_.update(y)
            else:
                self.model.update(y)
        except Exception as exc:
            self._fail("update", exc)
        return self

    def predict(self, horizon: int) -> QuantileForecast:
        if self.backup_ is None:
            try:
                fc = self.model.predict(horizon)
                if all(np.isfinite(a).all() for a in fc.quantiles.values()) and np.isfinite(fc.mean).all():
                    return fc
                self._fail("predict", "non-finite values")
            except Exception as exc:
                self._fail("predict", exc)
        fc = self.backup_.predict(horizon)
        fc.fallback_reason = self.reason_
        fc.fallbacks = {model_name(self.model): self.reason_}
        return fc


def model_name(model: object) -> str:
    """A model's registry name (``gbm``), or its class name when it has none."""
    return str(getattr(model, "name", "") or type(model).__name__)
