"""A bare number given to `forecast backtest --step` or `--horizons` is seconds, as parse_step's docstring says.

pandas reads a string such as '3600' as nanoseconds: `--step 3600` and `--horizons 3600` were refused with
"a duration of at least 1s"."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from balancer.cli import main
from balancer.forecast.traces import parse_step

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "0.5"]


@pytest.mark.parametrize(("text", "seconds"), [("3600", 3600), ("600", 600), (" 90 ", 90), ("1.5", 1.5),
                                                ("1e3", 1000)])
def test_a_bare_number_is_seconds(text, seconds):
    assert parse_step(text) == pd.Timedelta(seconds=seconds)


def _trace(tmp_path):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{10 + i % 6}\n" for i in range(6 * 48)))
    return trace


def test_step_as_bare_seconds(tmp_path, capsys):
    out = tmp_path / "bt.json"
    code = main(BACKTEST + ["--trace", str(_trace(tmp_path)), "--step", "3600", "--horizons", "1h",
                            "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    assert json.loads(out.read_text())["details"]["step_s"] == 3600.0


def test_horizons_as_bare_seconds(tmp_path, capsys):
    out = tmp_path / "bt.json"
    code = main(BACKTEST + ["--trace", str(_trace(tmp_path)), "--horizons", "3600,7200", "--json", str(out)])
    assert code == 0, capsys.readouterr().err
    scores = json.loads(out.read_text())["scores"]
    assert sorted({s["horizon_steps"] for s in scores}) == [6, 12]


@pytest.mark.parametrize("flag", ["--step", "--horizons"])
def test_a_bare_number_past_pandas_range_is_refused_naming_seconds(tmp_path, capsys, flag):
    value, allowed = "1e30", "a number of seconds"
    args = {"--step": "1h", "--horizons": "1h", flag: value}
    code = main(BACKTEST + ["--trace", str(_trace(tmp_path)), "--step", args["--step"], "--horizons",
                            args["--horizons"]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"field '{flag}': invalid value '{value}'" in err and allowed in err and "Traceback" not in err, err
