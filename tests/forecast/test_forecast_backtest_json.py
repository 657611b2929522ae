"""`gputide forecast backtest --json` writes strict JSON."""

from __future__ import annotations

import json

from forecast_synth import tidal

from balancer.cli import main


def test_json_scores_are_strict_json(tmp_path):
    """MASE has no value when the baseline is exact (its MAE is 0): the table prints nan, --json wrote a bare NaN,
    which strict parsers (jq, JavaScript) reject; it is null."""
    y, _ = tidal(days=4, noise=0.0, amp=0.0)   # flat demand: seasonal naive and persistence are exact
    path = tmp_path / "flat.csv"
    y.to_frame("value").rename_axis("timestamp").to_csv(path)
    out = tmp_path / "scores.json"
    rc = main(["forecast", "backtest", "--trace", str(path), "--horizons", "1h", "--models", "persistence",
               "--min-train-days", "2", "--json", str(out)])
    assert rc == 0

    def refuse(token):
        raise ValueError(token)

    rows = json.loads(out.read_text(), parse_constant=refuse)["scores"]
    assert rows[0]["mase_persistence"] is None
