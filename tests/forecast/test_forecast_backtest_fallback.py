"""A model that fails in the backtest is scored as persistence under its own name: how often must be said."""

from __future__ import annotations

from forecast_synth import tidal

from balancer.cli import main
from balancer.forecast import MODELS
from balancer.forecast.naive import Persistence


class _Broken(Persistence):
    name = "broken"

    def _fit(self, v):
        raise RuntimeError("solver diverged")


def test_a_model_failing_at_every_origin_is_reported_as_such(tmp_path, capsys, monkeypatch):
    """The note said 'fell back to persistence at least once' whether it was one origin or all of them, so a row
    that was persistence's own figures under the model's name read as the model's score."""
    monkeypatch.setitem(MODELS, "broken", _Broken)
    y, _ = tidal(days=4)
    path = tmp_path / "demand.csv"
    y.to_frame("value").rename_axis("timestamp").to_csv(path)
    rc = main(["forecast", "backtest", "--trace", str(path), "--horizons", "1h", "--models", "broken",
               "--min-train-days", "2", "--stride", "6"])
    assert rc == 0
    out = capsys.readouterr()
    scored = int(out.out.split(" scored origins")[0].rsplit(" ", 1)[-1])
    note = next(line for line in out.err.splitlines() if "broken" in line)
    assert "solver diverged" in note
    runs = [int(w) for w in note.replace(",", " ").split() if w.isdigit()]
    assert len(runs) >= 2 and runs[0] == runs[1] >= scored, note
