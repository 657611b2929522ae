"""Honest rolling-origin backtest: at every origin a model sees only the past, and is scored on what came true.

For each model, origins walk forward one step at a time (every `stride` steps: a quicker, noisier run whose
intervals are calibrated to the same level, see `conformal.calibrate_path`) from a burn-in point; the model is refitted
every `refit_every` steps (parameters re-estimated on everything before the origin) and otherwise only `update`d with
the newest observations, like the controller does. Each origin forecasts the longest horizon once; the
requested horizons, each a whole number of steps, are read off that path.

* Fitting sees the series as cleaned at the origin (outages masked, bursts clipped, from the past only:
  `traces.CausalClean`); scoring uses the unclipped truth with outages masked (an outage is not demand a model
  should have predicted).
* Intervals are re-calibrated conformally on residuals of earlier origins only (`conformal.calibrate_path`);
  horizon h calibrates on the residuals of the last max(`calib_days`, 7 x h) + h origins
  (`conformal.calibration_window`), so day-ahead intervals learn from a week of misses. The origins before the
  first scored one exist only to feed that calibration and are not scored: enough of them for the longest
  horizon's window, but none in the first two days (models need some history). They once covered `calib_days`
  plus the longest horizon only, so at the first scored origins a day-ahead horizon had three days of residuals
  (an effective sample of 6, `conformal.finite_level`) and read its p90 at the largest one.
* ``auto`` is the per-horizon ensemble of the other models, weighted by their errors at earlier origins whose
  truth is known (the same rule as `auto.Auto`), so its choice is re-evaluated as data arrives.

Scores per model and horizon: MAE of the p50, MASE against seasonal naive (daily) and against persistence
(ratio of MAEs on the same points), mean pinball loss over the quantiles 0.5/0.9/0.99, p90 coverage (share of
outcomes at or below the p90) and the time spent fitting and predicting (auto: its candidates' included).
Models with a calendar read it in the local time of `tz` (an IANA name, default UTC), the seasonal naive
baselines of MASE included.
"""

from __future__ import annotations

import time
from dataclasses import asdict, dataclass
from decimal import Decimal

import numpy as np
import pandas as pd

from balancer.forecast.auto import CANDIDATES, ensemble_weights
from balancer.forecast.base import QUANTILES, Fallback, make, step_of
from balancer.forecast.conformal import CAL_QUANTILES, calibrate_path, calibration_window
from balancer.forecast.traces import CausalClean, mask_outages

DAY_S = 86400.0
BASELINES = ("persistence", "seasonal_naive_daily", "seasonal_naive_weekly")


@dataclass(frozen=True)
class Score:
    model: str
    horizon: str
    horizon_steps: int
    n: int
    mae: float
    mase_seasonal: float
    mase_persistence: float
    pinball: float
    coverage_p90: float
    fit_s: float

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class Paths:
    """Forecasts of one model: quantile -> [origins, horizons]."""

    q: dict[float, np.ndarray]
    seconds: float
    fallback: str | None = None
    fallback_origins: int = 0   # origins served by the persistence fallback instead of the model


def run_model(name: str, y_fit: CausalClean, origins: np.ndarray, steps: np.ndarray, refit_every: int,
              tz: str = "UTC") -> Paths:
    model = Fallback(make(name, tz))
    hmax = int(steps.max())
    out = {q: np.full((len(origins), len(steps)), np.nan) for q in QUANTILES}
    reason, fell = None, 0
    t0 = time.perf_counter()
    last_fit = None
    for i, o in enumerate(origins):
        hist = y_fit.at(int(o))
        if last_fit is None or o - last_fit >= refit_every:
            model.fit(hist)
            last_fit = o
        else:
            model.update(hist)
        fc = model.predict(hmax)
        reason = reason or fc.fallback_reason
        fell += fc.fallback_reason is not None
        for q in QUANTILES:
            out[q][i] = fc.quantiles[q][steps - 1]
    return Paths(out, time.perf_counter() - t0, reason, fell)


def auto_paths(runs: dict[str, Paths], origins: np.ndarray, steps: np.ndarray, truth: np.ndarray,
               window: int, top: int = 3) -> Paths:
    """Ensemble of `runs`, weighted per horizon by MAE at earlier origins with known truth (last `window`)."""
    t0 = time.perf_counter()
    names = list(runs)
    out = {q: np.zeros((len(origins), len(steps))) for q in QUANTILES}
    for j, h in enumerate(steps):
        target = origins + h
        y = np.where(target < len(truth), truth[np.clip(target, 0, len(truth) - 1)], np.nan)
        err = np.vstack([np.abs(y - runs[n].q[0.5][:, j]) for n in names])  # [models, origins]
        ok = np.isfinite(err)
        csum = np.concatenate([np.zeros((len(names), 1)), np.cumsum(np.where(ok, err, 0.0), axis=1)], axis=1)
        cnt = np.concatenate([np.zeros((len(names), 1)), np.cumsum(ok, axis=1)], axis=1)
        hi = np.searchsorted(target, origins, side="right")
        lo = np.minimum(np.searchsorted(origins, origins - window, side="left"), hi)
        with np.errstate(invalid="ignore", divide="ignore"):
            mae = (csum[:, hi] - csum[:, lo]) / (cnt[:, hi] - cnt[:, lo])  # [models, origins]
        w = ensemble_weights(mae, top)
        for q in QUANTILES:
            out[q][:, j] = (w * np.vstack([runs[n].q[q][:, j] for n in names])).sum(axis=0)
    # auto's cost is its candidates' runs plus the weighting: without them it has nothing to combine
    return Paths(out, time.perf_counter() - t0 + sum(r.seconds for r in runs.values()))


def pinball(y: np.ndarray, qs: dict[float, np.ndarray]) -> float:
    losses = [np.mean(np.maximum(q * (y - f), (q - 1) * (y - f))) for q, f in qs.items()]
    return float(np.mean(losses))


def _label(seconds: float) -> str:
    """A horizon as words: each row is labelled with the horizon asked for (`backtest`), not its steps times the
    step, so six steps of a jittered trace's 600.000089 s asked as 3600 s read "1h", and 2.5 s steps "2.5s" (once
    rounded to the second for the former, it printed the latter as "2s")."""
    if seconds % 3600 == 0:
        return f"{int(seconds // 3600)}h"
    return f"{int(seconds // 60)}min" if seconds % 60 == 0 else f"{seconds:g}s"


def _step_shown(step: float) -> str:
    """The trace's step exactly: 600.000002s, where :g printed 600s, a step a horizon seems a multiple of."""
    return f"{Decimal(round(step * 1e9)) / 1_000_000_000}s"


def _past_end(horizon: str, first: int, n: int, step: float) -> str:
    """Why `horizon` scores nothing, naming the longest that does: the steps from the first scored origin (`first`)
    to the trace's last, as a duration to type (whole seconds where those are as many steps, within `STEP_SLACK`:
    1008 steps of a jittered 600.000089 s read 168h, not 604800s) and as those steps of the step. It printed the
    steps times the step alone, after "longest horizon", which read as the longest asked for."""
    steps = n - 1 - first
    seconds = steps * step
    if abs(round(seconds) / step - steps) <= STEP_SLACK:
        seconds = float(round(seconds))
    every = _label(step) if float(f"{step:g}") == step else _step_shown(step)
    return (f"horizon {horizon} reaches past the trace's end from every scored origin (scoring starts at "
            f"step {first} of {n}; longest horizon {_label(seconds)}, the {steps} steps of {every} from there to "
            f"the trace's end)")


# how far from a whole number of steps a horizon may be, in steps: a trace's own step is the median gap between its
# times, 600.000089s where they jitter, and 24h is then 143.99998 of its steps (scored as 144), while 90min on an
# hourly trace is not, nor 24h1min or 1h1s on 10-minute steps (a slack growing with the horizon took those)
STEP_SLACK = 1e-3


class HorizonError(ValueError):
    """A horizon `whole_steps` refuses: `index` is its place among those asked, `allowed` what a horizon may be, and
    `between` whether it fell between two steps (a step of another length might take it)."""

    def __init__(self, index: int, name: str, allowed: str, between: bool = False) -> None:
        super().__init__(f"horizon {name}: allowed are {allowed}")
        self.index, self.allowed, self.between = index, allowed, between


def whole_steps(horizons_s, step: float, names: list[str]) -> np.ndarray:
    """Each horizon in steps: a whole number of them (to within `STEP_SLACK`), at least one, and no two horizons of
    the same steps; else `HorizonError` naming the first that is not as `names` write it (the CLI: as typed).

    Horizons between two steps were rounded to the nearer (90 and 150 minutes on an hourly trace both scored, as two
    rows of '2h'), and two of the same steps (3600 and 3600.3 s on 10-minute steps) are two identical rows. The step
    is shown exactly (`_step_shown`)."""
    shown = _step_shown(step)
    ratio = np.asarray(horizons_s, dtype=float) / step
    steps = np.rint(ratio).astype(int)
    seen: dict[int, str] = {}
    for i, (r, s) in enumerate(zip(ratio, steps.tolist(), strict=True)):
        if s < 1:   # rounded: one step of a jittered trace (10min of 600.000089s) is one step
            raise HorizonError(i, names[i], f"durations of at least one step ({shown})")
        if abs(r - s) > STEP_SLACK:
            raise HorizonError(i, names[i], f"multiples of the trace's step ({shown})", between=True)
        if s in seen:
            raise HorizonError(i, names[i], f"horizons of different numbers of steps ({shown}): {seen[s]} is as many")
        seen[s] = names[i]
    return steps


def backtest(y: pd.Series, *, models: list[str] | None = None, horizons_s: list[float] = (3600, 4 * 3600, DAY_S),
             min_train_days: float = 7.0, calib_days: float = 3.0, refit_every_s: float = DAY_S,
             stride: int = 1, keep_paths: bool = False, tz: str = "UTC") -> tuple[list[Score], dict]:
    """Rolling-origin backtest of `models` on `y` (raw demand); returns scores and run details.

    With `keep_paths`, `details["paths"][(model, horizon label)]` holds the scored forecasts as a DataFrame indexed
    by the time they forecast (columns: actual, 0.5, 0.9, 0.99), for plots of forecast vs actual."""
    step = step_of(y)
    n = len(y)
    labels = [_label(float(h)) for h in horizons_s]   # as asked, not steps x step (jittered, or 2.5s steps)
    steps = whole_steps(horizons_s, step, labels)
    longest = labels[int(np.argmax(steps))]
    day = int(round(DAY_S / step))
    score_start = min(int(min_train_days * DAY_S / step), n // 2)
    # calibration origins: the longest horizon's whole calibration window (`calibration_window`: a week of
    # day-ahead residuals) known by the first scored origin, or as much of it as two days of burn-in leave
    first = max(score_start - calibration_window(int(calib_days * day), int(steps.max())),
                min(2 * day, score_start // 2), 2)
    origins = np.arange(first, n - int(steps.min()), stride)
    if 1 <= n - 1 - score_start < steps.min():   # every horizon asked for passes the end from the first scored origin
        raise ValueError(_past_end(longest, score_start, n, step))
    if len(origins) < 2 or not np.any(origins >= score_start):
        raise ValueError(f"series too short for a backtest: {n} steps of {step:g}s")
    reach = n - 1 - int(origins[origins >= score_start][0])   # steps from the first scored origin to the end
    if steps.max() > reach:   # no outcome to score: rows of n = 0 and NaN
        raise ValueError(_past_end(longest, n - 1 - reach, n, step))
    truth = mask_outages(y).to_numpy(float)
    y_fit = CausalClean(y)
    requested = list(models or [*CANDIDATES, "auto"])
    refit = max(int(round(refit_every_s / step)), 1)
    runs: dict[str, Paths] = {}
    for name in dict.fromkeys([*BASELINES, *(CANDIDATES if "auto" in requested else ()), *requested]):
        if name != "auto":
            runs[name] = run_model(name, y_fit, origins, steps, refit, tz)
    if "auto" in requested:
        cands = {k: v for k, v in runs.items() if k in CANDIDATES}
        runs["auto"] = auto_paths(cands, origins, steps, truth, window=int(calib_days * day))
    window = int(calib_days * day)
    scored = origins >= score_start
    scores = []
    details = {"step_s": step, "timezone": tz, "origins": int(scored.sum()),
               "calibration_origins": int((~scored).sum()),
               "first_scored": str(y.index[origins[scored][0]]),
               "fallbacks": {k: f"{v.fallback_origins} of {len(origins)} origins, first: {v.fallback}"
                             for k, v in runs.items() if v.fallback}}
    base_err = {}
    for name in BASELINES:
        for j, h in enumerate(steps):
            target = origins + h
            yt = np.where(target < n, truth[np.clip(target, 0, n - 1)], np.nan)
            base_err[(name, j)] = np.abs(yt - runs[name].q[0.5][:, j])
    for name in requested:
        run = runs[name]
        for j, h in enumerate(steps):
            target = origins + h
            yt = np.where(target < n, truth[np.clip(target, 0, n - 1)], np.nan)
            p50 = run.q[0.5][:, j]
            cal = calibrate_path(origins, int(h), p50, {q: run.q[q][:, j] for q in QUANTILES}, truth,
                                 window=calibration_window(window, int(h)),
                                 windows={q: calibration_window(window, int(h), q) for q in CAL_QUANTILES})
            cal[0.9] = np.maximum(cal[0.9], p50)
            cal[0.99] = np.maximum(cal[0.99], cal[0.9])
            ok = scored & np.isfinite(yt)
            mae = float(np.mean(np.abs(yt - p50)[ok]))
            if keep_paths:
                at = y.index[np.clip(target[scored], 0, n - 1)]
                details.setdefault("paths", {})[(name, labels[j])] = pd.DataFrame(
                    {"actual": yt[scored], **{q: cal[q][scored] for q in QUANTILES}}, index=at)
            sn = float(np.mean(base_err[("seasonal_naive_daily", j)][ok]))
            pe = float(np.mean(base_err[("persistence", j)][ok]))
            scores.append(Score(
                model=name, horizon=labels[j], horizon_steps=int(h), n=int(ok.sum()), mae=mae,
                mase_seasonal=mae / sn if sn > 0 else float("nan"),
                mase_persistence=mae / pe if pe > 0 else float("nan"),
                pinball=pinball(yt[ok], {q: cal[q][ok] for q in QUANTILES}),
                coverage_p90=float(np.mean(yt[ok] <= cal[0.9][ok])),
                fit_s=run.seconds))
    details["baseline_mae"] = {f"{b}@{labels[j]}": float(np.nanmean(
        base_err[(b, j)][scored & np.isfinite(base_err[(b, j)])])) for b in BASELINES for j in range(len(steps))}
    return scores, details


def format_table(scores: list[Score]) -> str:
    head = ("| model | horizon | n | MAE | MASE vs seasonal naive | MASE vs persistence | pinball | p90 coverage "
            "| fit s |")
    rows = [head, "|" + "---|" * 9]
    for s in scores:
        rows.append(f"| {s.model} | {s.horizon} | {s.n} | {s.mae:.2f} | {s.mase_seasonal:.3f} | "
                    f"{s.mase_persistence:.3f} | {s.pinball:.2f} | {s.coverage_p90:.3f} | {s.fit_s:.2f} |")
    return "\n".join(rows)
