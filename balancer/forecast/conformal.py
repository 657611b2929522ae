"""Conformal calibration of forecast quantiles on out-of-sample residuals, per horizon.

A model's own intervals are usually too narrow (parameter uncertainty, bursts, regime changes) or too wide.
Split-conformal calibration replaces them with what its past mistakes say: for horizon h, keep the signed
residuals ``r = truth - p50`` of forecasts issued at earlier origins whose truth is already known (origin + h
<= now), over a trailing window; the calibrated quantile q is ``p50 + Q_q(r)``. With exchangeable residuals the
calibrated p90 covers about 90% of outcomes, whatever the model.

Residuals are relative (divided by the forecast level, floored at a small share of the mean level) so that a
quiet night does not inherit the width of a busy evening. The median itself is left as the model made it (MAE
measures the model, not the calibration); until `min_n` residuals exist the model's raw quantiles are used.
"""

from __future__ import annotations

from collections import deque

import numpy as np

CAL_QUANTILES = (0.9, 0.99)


def _relative(truth: np.ndarray, p50: np.ndarray, floor: float) -> np.ndarray:
    return (truth - p50) / np.maximum(np.abs(p50), floor)


def calibrate_path(origin_idx: np.ndarray, h: int, p50: np.ndarray, raw: dict[float, np.ndarray],
                   truth: np.ndarray, *, window: int, min_n: int = 24) -> dict[float, np.ndarray]:
    """Calibrated quantiles at one horizon `h` (steps) for forecasts issued at `origin_idx` (sorted).

    `p50[i]`/`raw[q][i]`: the forecasts of origin i for its step h; `truth`: the whole series (NaN = unknown).
    Only residuals of origins o' with o' + h <= origin_idx[i] and o' >= origin_idx[i] - window are used.
    """
    target = origin_idx + h
    y = np.where(target < len(truth), truth[np.clip(target, 0, len(truth) - 1)], np.nan)
    level = np.nanmean(np.abs(truth)) if np.isfinite(truth).any() else 1.0
    floor = max(0.05 * level, 1e-9)
    r = _relative(y, p50, floor)
    out = {q: np.array(raw[q], float, copy=True) for q in raw}
    known_at = target  # residual of origin j becomes known at time origin_idx[j] + h
    lo = np.searchsorted(origin_idx, origin_idx - window, side="left")
    hi = np.searchsorted(known_at, origin_idx, side="right")
    for i in range(len(origin_idx)):
        sample = r[lo[i]:hi[i]]
        sample = sample[np.isfinite(sample)]
        if sample.size < min_n:
            continue
        scale = max(abs(p50[i]), floor)
        for q in CAL_QUANTILES:
            if q in out:
                out[q][i] = p50[i] + np.quantile(sample, q) * scale
    return out


class OnlineCalibrator:
    """The same calibration for a running controller: residuals arrive one at a time, per horizon."""

    def __init__(self, window: int, min_n: int = 24) -> None:
        self.window = window
        self.min_n = min_n
        self.residuals: dict[int, deque] = {}
        self.level = 0.0
        self.count = 0

    def add(self, h: int, truth: float, p50: float) -> None:
        if not (np.isfinite(truth) and np.isfinite(p50)):
            return
        self.count += 1
        self.level += (abs(truth) - self.level) / min(self.count, 1000)
        floor = max(0.05 * self.level, 1e-9)
        self.residuals.setdefault(h, deque(maxlen=self.window)).append((truth - p50) / max(abs(p50), floor))

    def apply(self, p50: np.ndarray, raw: dict[float, np.ndarray]) -> dict[float, np.ndarray]:
        """Calibrate a whole path (steps 1..len(p50)); horizons without enough residuals borrow the nearest."""
        out = {q: np.array(a, float, copy=True) for q, a in raw.items()}
        known = sorted(h for h, d in self.residuals.items() if len(d) >= self.min_n)
        if not known:
            return out
        floor = max(0.05 * self.level, 1e-9)
        steps = np.arange(1, len(p50) + 1)
        pos = np.clip(np.searchsorted(known, steps), 0, len(known) - 1)
        offsets = {h: {q: np.quantile(np.asarray(self.residuals[h]), q) for q in CAL_QUANTILES} for h in known}
        scale = np.maximum(np.abs(p50), floor)
        for q in CAL_QUANTILES:
            if q in out:
                off = np.array([offsets[known[p]][q] for p in pos])
                out[q] = p50 + off * scale
        return out
