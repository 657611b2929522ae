"""The backtest's forecasts at an origin may depend only on the demand up to it."""

from __future__ import annotations

import numpy as np
from forecast_synth import DAY, tidal

from balancer.forecast.backtest import backtest


def _p50_issued_before(y, cut, model):
    _, details = backtest(y, models=[model], horizons_s=[3600], min_train_days=3, calib_days=1, keep_paths=True)
    path = details["paths"][(model, "1h")]
    issued = path.index - np.timedelta64(3600, "s")
    return path.loc[issued < y.index[cut], 0.5].to_numpy()


def test_outage_mask_of_the_fit_history_ignores_what_follows_the_origin():
    """Fitting saw the outage mask of the whole trace: a zero run of two hours was masked (an outage) or kept (real
    idle time) depending on whether it went on past 6 h, after the origin; a live forecaster at the origin sees
    neither, so persistence forecast zero from the first silent step of what turned out to be idle time."""
    y, _ = tidal(days=6, noise=2.0)
    step = 600
    cut = int(4.5 * DAY / step)
    short, long = y.copy(), y.copy()
    short.iloc[cut - 12:cut + 1] = 0.0   # 2 h of zeros then demand again: an outage
    long.iloc[cut - 12:cut + 60] = 0.0   # the same 2 h, going on for 12 h: idle time
    a, b = _p50_issued_before(short, cut, "persistence"), _p50_issued_before(long, cut, "persistence")
    assert len(a) > 12
    np.testing.assert_array_equal(a, b)


def test_causal_clean_is_the_cleaning_of_the_history_at_each_origin():
    from balancer.forecast.traces import CausalClean, clean_for_fit

    y, _ = tidal(days=4, noise=2.0, seed=3)
    rng = np.random.default_rng(3)
    for start in rng.integers(10, len(y) - 80, 8):
        y.iloc[start:start + int(rng.integers(1, 70))] = 0.0
    y.iloc[rng.integers(0, len(y), 20)] = np.nan
    cc = CausalClean(y)
    for o in range(5, len(y), 7):
        np.testing.assert_array_equal(cc.at(o).to_numpy(), clean_for_fit(y.iloc[:o + 1]).to_numpy())

