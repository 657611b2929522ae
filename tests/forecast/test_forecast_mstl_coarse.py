"""MSTL decomposes on a coarse grid when the step is fine. statsmodels' MSTL costs about (points x longest period):
at the controller's default 300 s step with 28 days kept, the weekly season is 2016 of 8064 points and one fit
took 15.6 s (a cycle refitting two services 33.7 s, past the loop's 30 s interval). The seasons are now
estimated on means of k steps (k = 12 there: 672 hourly points, periods 24 and 168), mapped back to every step,
and the damped Holt filter still runs at the fine step."""

from __future__ import annotations

import numpy as np
import pytest
import statsmodels.tsa.seasonal as seasonal
from forecast_synth import future_truth

from balancer.forecast.stats import MSTLModel, coarse_grid

DAY5 = 288    # 5-minute steps in a day
WEEK5 = 2016

GRIDS = [
    # (case, periods, points, (k, fine periods kept, coarse periods))
    ("28 days of 5-minute steps decompose on hourly means", [DAY5, WEEK5], 28 * DAY5, (12, [DAY5, WEEK5], [24, 168])),
    ("10 days of 5-minute steps, no weekly season yet, on 10-minute means", [DAY5, WEEK5], 10 * DAY5,
     (2, [DAY5], [144])),
    ("two weeks and one step: the week is half the hourly series, so it waits", [DAY5, WEEK5], 2 * WEEK5 + 1,
     (2, [DAY5], [144])),
    ("10-minute steps with the daily season only stay as they are", [144, 1008], 14 * 144, (1, [144], [144])),
    ("hourly steps stay as they are", [24, 168], 28 * 24, (1, [24, 168], [24, 168])),
    ("one day of history has no season", [DAY5, WEEK5], DAY5, (1, [], [])),
]


@pytest.mark.parametrize(("periods", "n", "want"), [g[1:] for g in GRIDS], ids=[g[0] for g in GRIDS])
def test_the_coarse_grid_keeps_the_longest_season_within_168_points(periods, n, want):
    assert coarse_grid(periods, n, 168) == want


def test_the_default_model_gives_statsmodels_hourly_means_for_28_days_of_5_minute_steps(monkeypatch):
    seen = []
    real = seasonal.MSTL

    def spy(endog, periods, **kw):
        seen.append((len(endog), np.atleast_1d(periods).tolist()))
        return real(endog, periods=periods, **kw)

    monkeypatch.setattr(seasonal, "MSTL", spy)
    y, _ = future_truth(28, 300, 1, weekly=30.0)
    model = MSTLModel().fit(y)
    assert seen == [(28 * 24, [24, 168])]
    assert model.period_ == WEEK5                     # the profile is still one value per 5-minute step


WEEKS = [
    # (case, days of history, noise sd, bound on the first hour's MAE)
    ("saturday 00:00, the dip's edge smoothed over half an hour each side", 33.0, 5.0, 6.0),
    ("saturday 12:00", 33.5, 5.0, 3.0),
    ("sunday 06:00", 34.25, 5.0, 3.0),
    # the last half hour lies past the last hourly mean; held flat there, the tide's steepest slope (12:00) bent
    # the remainder and a level that follows it closely (little noise) ended 5.7 low
    ("saturday 12:00 with little noise", 33.5, 0.5, 3.0),
]


@pytest.mark.parametrize(("days", "noise", "first_hour"), [w[1:] for w in WEEKS], ids=[w[0] for w in WEEKS])
def test_the_weekend_dip_and_the_daily_tide_are_forecast_at_5_minute_steps(days, noise, first_hour):
    # tidal: base 100, daily sine of amplitude 50, 30 less on Saturdays and Sundays. A half-hour misalignment of
    # the seasons mapped back from hourly means would cost about 6.5 over the day (decomposing every 5-minute step
    # gave 4.1-4.4 at noise sd 5: its last cycle is noisier); hourly means cannot resolve a step within the hour,
    # so the dip's midnight edge becomes an hour's ramp
    y, truth = future_truth(days, 300, DAY5, weekly=30.0, noise=noise)
    fc = MSTLModel().fit(y).predict(DAY5)
    err = np.abs(fc.quantiles[0.5] - truth)
    assert float(err.mean()) < 2.5, f"24h MAE {err.mean():.2f}"
    assert float(err[:12].mean()) < first_hour, f"first hour MAE {err[:12].mean():.2f}"
