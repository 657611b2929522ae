"""A --step or --horizons duration is numbers each with a unit, largest first, each unit once; nothing else.

Before: parse_step handed the text to pandas.Timedelta, which read `1,5h` as 15 h, `1.5.5h` as 2 h and
`10min20min` as 30 min: a backtest ran at a step its writer never meant, exit 0.
"""

from __future__ import annotations

import pandas as pd
import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand, parse_step

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "0.5"]
ALLOWED = "a duration such as 10min, 1h, 1d12h, 600s or a number of seconds"


@pytest.mark.parametrize("text", ["1,5h", "1.5.5h", "10min20min", "1h1d", "1h 1h", "1M", "1y", "1e3h", "h",
                                  "1h-30m", "01:00:00", "1 days 02:00:00"])
def test_a_duration_pandas_would_guess_at_is_refused(text):
    with pytest.raises(InputError) as info:
        parse_step(text, field="--step")
    assert (info.value.field, info.value.value, info.value.allowed) == ("--step", text, ALLOWED)


@pytest.mark.parametrize(("text", "seconds"), [
    ("10min", 600), ("1h", 3600), ("30s", 30), ("1d", 86400), ("8d", 8 * 86400), ("1d12h", 36 * 3600),
    ("1h30m", 5400), ("1m30s", 90), ("1.5h", 5400), ("2 days", 2 * 86400), ("1 h 30 min", 5400), ("1D", 86400),
    ("1w", 7 * 86400), ("3600", 3600), ("1e3", 1000),
])
def test_the_documented_forms_still_read(text, seconds):
    assert parse_step(text) == pd.Timedelta(seconds=seconds)


@pytest.mark.parametrize(("flag", "given", "value"), [
    ("--step", "1,5h", "1,5h"), ("--step", "10min20min", "10min20min"), ("--horizons", "1.5.5h", "1.5.5h"),
    ("--horizons", "4h,2h2h", "2h2h"),
])
def test_backtest_refuses_them_naming_the_flag(tmp_path, capsys, flag, given, value):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{10 + i % 6}\n" for i in range(6 * 48)))
    args = {"--step": "1h", "--horizons": "4h", flag: given}
    code = main(BACKTEST + ["--trace", str(trace), "--step", args["--step"], "--horizons", args["--horizons"]])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == f"gputide: error: field '{flag}': invalid value '{value}'; allowed: {ALLOWED}", err


DECIMAL_STEPS = [("4.1min", 246), ("33.3min", 1998), ("8.2h", 29520), ("0.7d", 60480), ("4.1s", 4.1),
                 ("1.001s", 1.001), ("1s1ms", 1.001)]


@pytest.mark.parametrize(("text", "seconds"), DECIMAL_STEPS)
def test_a_decimal_step_is_exact_to_the_microsecond(text, seconds):
    """Summed in floats, 4.1min was 245.99999999999997 s, a Timedelta of 245999999999 ns: pandas refused to resample
    microsecond times at that step and every decimal --step such as 33.3min was a traceback (exit 1)."""
    step = parse_step(text)
    assert step == pd.Timedelta(microseconds=round(seconds * 1_000_000)), step
    assert step.value % 1000 == 0


def test_below_a_microsecond_is_rounded_to_the_nearest_one():
    assert parse_step("1s1ns") == pd.Timedelta(seconds=1)
    assert parse_step(245.99999999999997) == pd.Timedelta(seconds=246)   # 4.1 x 60 in floats, given as seconds


@pytest.mark.parametrize(("text", "seconds"), DECIMAL_STEPS)
def test_a_trace_loads_at_a_decimal_step(tmp_path, text, seconds):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{7200 * i},{10 + i % 6}\n" for i in range(24 * 4)))
    y = load_demand(trace, step=text)
    assert y.index.freq == pd.Timedelta(microseconds=round(seconds * 1_000_000))
    assert y.index[1] - y.index[0] == y.index.freq and y.notna().sum() >= 2


def test_backtest_runs_at_a_decimal_step(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{60 * i},{10 + i % 6}\n" for i in range(60 * 36)))
    # 41min: ten steps (a horizon is a whole number of steps; 1h, 14.6 of them, is refused)
    code = main(BACKTEST + ["--trace", str(trace), "--step", "4.1min", "--horizons", "41min"])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "steps of 246s" in captured.out and "| persistence | 41min |" in captured.out, captured.out
