"""`forecast backtest` on a trace too long to load at --step (or at its own step) names the step the backtest runs it
at, not only the one the loader reads it at (audit a3 of 5859090d). The loader's 'a --step of at least 2 seconds
loads it' on a 69-day daily trace was refused next as finer than the trace's own (86400s); on a 1 s trace with one
row 100 days on, as more work than a backtest does ('at least 180s'). The loader's limit and the backtest's origins
are lowered (monkeypatch) so that the backtest at the step named runs in a second."""

from __future__ import annotations

import re

import pytest

from balancer.cli import main
from balancer.cmd import forecast
from balancer.forecast import traces

START = 1704067200   # 2024-01-01T00:00:00Z
DAY = 86400


def _backtest(trace, *extra) -> int:
    return main(["forecast", "backtest", "--trace", str(trace), "--models", "persistence", *extra])


def _named(capsys, code: int, trace, given: str) -> int:
    return _named_in(capsys.readouterr().err, code, trace, given)


def _named_in(err: str, code: int, trace, given: str) -> int:
    assert code == 2, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    found = re.search(rf"{re.escape(str(trace))}: field '--step': invalid value {re.escape(given)}; allowed: a --step "
                      r"of at least (\d+)s over this trace's span: ", err)
    assert found, err
    return int(found.group(1))


def test_a_daily_trace_at_1s_is_told_its_own_step(tmp_path, capsys):
    trace = tmp_path / "daily.csv"   # 69 days: 5,961,600 steps of 1s, too many for the loader (at least 2s loads it)
    trace.write_text("timestamp,value\n" + "".join(f"{START + i * DAY},{5 + i % 3}\n" for i in range(70)))
    code = _backtest(trace, "--step", "1s", "--horizons", "1d")
    err = capsys.readouterr().err
    assert "the trace's own step is 86400s: a finer --step may leave steps empty and be refused" in err, err
    assert _named_in(err, code, trace, "'1s'") == DAY
    assert _backtest(trace, "--step", str(DAY), "--horizons", "1d") == 0, capsys.readouterr().err
    assert _backtest(trace, "--step", "2", "--horizons", "1d") == 2   # the loader's least: finer than the trace's own
    assert "a step no finer than the trace's own (86400s" in capsys.readouterr().err


def test_a_daily_trace_at_1s_with_hourly_horizons_is_told_they_must_be_whole_steps_of_it(tmp_path, capsys):
    trace = tmp_path / "daily.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{START + i * DAY},{5 + i % 3}\n" for i in range(70)))
    assert _backtest(trace, "--step", "1s") == 2
    err = capsys.readouterr().err
    assert "a --step of at least 86400s over this trace's span" in err, err
    assert "; --horizons then whole multiples of it" in err, err


@pytest.mark.parametrize("step, given", [pytest.param([], "\"1s (the trace's own step)\"", id="no --step"),
                                         pytest.param(["--step", "1"], "'1'", id="--step 1")])
def test_a_1s_trace_with_a_row_days_on_is_told_the_step_its_backtest_runs_at(tmp_path, capsys, monkeypatch, step,
                                                                             given):
    """MAX_STEPS 2000 and MAX_ORIGINS 1000 stand for 5M and 50,000: 600 rows 1 s apart and one 899,050 s on load at
    450 s or coarser; the backtest makes at most 1000 forecasts, so needs 900 s (899050 // 900 + 2 = 1000 steps)."""
    monkeypatch.setattr(traces, "MAX_STEPS", 2000)
    monkeypatch.setattr(forecast, "MAX_ORIGINS", 1000)
    trace = tmp_path / "gap.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{START + i},{5 + i % 3}\n" for i in range(600))
                     + f"{START + 899050},4\n")
    named = _named(capsys, _backtest(trace, *step), trace, given)
    assert named == 900
    assert _backtest(trace, "--step", str(named)) == 0, capsys.readouterr().err
    assert _backtest(trace, "--step", str(named - 1)) == 2   # one second finer: more origins than it makes
    assert "field '--stride'" in capsys.readouterr().err


def test_a_1s_trace_whose_least_step_divides_the_horizons_is_told_they_must_be_whole_steps_of_it(tmp_path, capsys,
                                                                                                 monkeypatch):
    """The outage mask's bound refusing the trace's own step names the step as the too-long refusal does, with its
    '--horizons then whole multiples of it': 7s divides 1001s, so it was left out, and --step 8, 'at least 7s', was
    refused next for --horizons. MAX_STEP_PAIRS 1.5e7 stands for 1e9: 2 h at 1s stands for 3 days (least 7s both)."""
    monkeypatch.setattr(forecast, "MAX_STEP_PAIRS", 1.5e7)
    trace = tmp_path / "seconds.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{START + i},{5 + i % 7}\n" for i in range(7200)))
    code = _backtest(trace, "--horizons", "1001s")
    err = capsys.readouterr().err
    assert _named_in(err, code, trace, "\"1s (the trace's own step)\"") == 7
    assert "; --horizons then whole multiples of it (7200 steps x 86400 a day)" in err, err
    assert _backtest(trace, "--horizons", "1001s", "--step", "7") == 0, capsys.readouterr().err
    assert _backtest(trace, "--horizons", "1001s", "--step", "8") == 2   # at least 7s, not a multiple
    assert "field '--horizons': invalid value '1001s'" in capsys.readouterr().err
