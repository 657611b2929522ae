"""Synthetic demand with known daily/weekly seasonality for the forecast tests (no shared data needed)."""

from __future__ import annotations

import numpy as np
import pandas as pd

DAY = 86400


def tidal(days: float = 9, step_s: int = 600, base: float = 100.0, amp: float = 50.0, weekly: float = 0.0,
          noise: float = 5.0, hetero: bool = False, seed: int = 0, start: str = "2024-01-01T00:00:00Z"):
    """(observed series, noiseless truth): base + amp*sin(day phase) (+ weekend dip), Gaussian noise."""
    n = int(days * DAY / step_s)
    t = np.arange(n) * step_s
    clean = base + amp * np.sin(2 * np.pi * t / DAY) - weekly * ((t // DAY) % 7 >= 5)
    rng = np.random.default_rng(seed)
    sd = noise * (clean / base if hetero else 1.0)
    y = clean + rng.normal(0.0, 1.0, n) * sd
    idx = pd.date_range(start, periods=n, freq=pd.Timedelta(seconds=step_s))
    return pd.Series(np.maximum(y, 0.0), index=idx), pd.Series(clean, index=idx)


def future_truth(days: float, step_s: int, horizon: int, **kw) -> tuple[pd.Series, np.ndarray]:
    """Series of `days` and the noiseless values of the next `horizon` steps."""
    n = int(days * DAY / step_s)
    extra = (horizon * step_s) / DAY
    y, clean = tidal(days + extra + 1e-9, step_s, **kw)
    return y.iloc[:n], clean.to_numpy()[n:n + horizon]
