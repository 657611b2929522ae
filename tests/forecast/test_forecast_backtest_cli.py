"""`gputide forecast backtest` on a trace too short for a horizon: refused, not a table of NaN."""

from __future__ import annotations

from forecast_synth import tidal

from balancer.cli import main


def _trace(tmp_path, days):
    y, _ = tidal(days=days)
    path = tmp_path / "demand.csv"
    y.to_frame("value").rename_axis("timestamp").to_csv(path)
    return path


def test_a_horizon_no_scored_origin_reaches_is_refused(tmp_path, capsys):
    """On a two-day trace scoring starts after a day, so no day-ahead outcome lies in the trace: the 24h rows were
    n = 0 and NaN everywhere under numpy warnings, exit 0, and --json wrote NaN (not JSON)."""
    rc = main(["forecast", "backtest", "--trace", str(_trace(tmp_path, 2)), "--horizons", "1h,24h",
               "--models", "persistence"])
    assert rc == 2
    err = capsys.readouterr().err
    assert "24h" in err and "nan" not in err.lower()

