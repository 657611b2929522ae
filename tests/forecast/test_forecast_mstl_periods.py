"""MSTL with a season exactly half the history. statsmodels' MSTL drops every period >= nobs / 2, and the model
kept those with 2 * period <= history, so with exactly two weeks of history (a week at hourly steps: 168 of 336)
MSTL returned one seasonal component for two periods, the fit raised `index 1 is out of bounds` and the
controller forecast by persistence (the 7-day tidal run logged it): the period is used only below half."""

from __future__ import annotations

import numpy as np
import pandas as pd

from balancer.forecast.stats import MSTLModel


def test_a_weekly_season_of_exactly_half_the_history_fits_on_the_daily_season():
    idx = pd.date_range("2026-01-05", periods=14 * 24, freq="1h", tz="UTC")
    phase = np.arange(len(idx)) % 24
    y = pd.Series(100 + 50 * np.sin(2 * np.pi * phase / 24), index=idx)
    model = MSTLModel().fit(y)
    assert model.period_ == 24                        # the weekly season (168 = 336 / 2) left out, not a crash
    fc = model.predict(24)
    truth = 100 + 50 * np.sin(2 * np.pi * (np.arange(24) % 24) / 24)
    assert float(np.mean(np.abs(fc.quantiles[0.5] - truth))) < 5.0
