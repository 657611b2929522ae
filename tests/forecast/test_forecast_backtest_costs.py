"""What the backtest reports besides the errors: the cost of each model."""

from __future__ import annotations

from forecast_synth import tidal

from balancer.forecast.backtest import backtest


def test_auto_fit_time_includes_its_candidates():
    """The ensemble cannot forecast without running every candidate; its 'fit s' was only the weighting (0.00 in
    the table), so auto read as the cheapest model when it is the costliest."""
    from balancer.forecast.auto import CANDIDATES

    y, _ = tidal(days=5, noise=2.0)
    scores, _ = backtest(y, models=["persistence", "profile", "auto"], horizons_s=[3600], min_train_days=3,
                         calib_days=1, stride=6)
    fit = {s.model: s.fit_s for s in scores}
    assert len(CANDIDATES) > 2
    assert fit["auto"] >= fit["persistence"] + fit["profile"]
