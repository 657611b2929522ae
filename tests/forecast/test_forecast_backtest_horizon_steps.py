"""A backtest horizon is a whole number of the trace's steps, refused otherwise naming it as the user wrote it.

Before (auditor s35s2): a horizon between two steps was rounded to the nearer, so `--horizons 90min,150min` on an
hourly trace printed two identical '2h' rows (exit 0); one under a step was refused showing it in seconds (1800.0)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from balancer.cli import main
from balancer.forecast.backtest import BASELINES, backtest

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "3"]


def _hourly(tmp_path):
    path = tmp_path / "hourly.csv"
    path.write_text("timestamp,value\n" + "".join(f"{3600 * i},{1 + i % 5}\n" for i in range(400)))
    return path


def _jittered(tmp_path):
    """Times 600 s apart give or take a few milliseconds: the trace's own step (the median gap) is 600.000089 s."""
    rng = np.random.default_rng(7)
    t = 600.0 * np.arange(2000) + rng.uniform(0, 0.03, 2000)
    path = tmp_path / "jitter.csv"
    path.write_text("timestamp,value\n" + "".join(f"{x:.6f},{1 + i % 7}\n" for i, x in enumerate(t)))
    return path


def _series(step_s: float, n: int) -> pd.Series:
    index = pd.date_range("2024-01-01", periods=n, freq=pd.Timedelta(seconds=step_s), tz="UTC")
    return pd.Series(np.arange(n) % 5 + 1.0, index=index)


def _one_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize(("horizons", "value"), [("90min,150min", "90min"), ("1h,150min", "150min"),
                                                 ("1h,1.5h", "1.5h"), ("5400", "5400")])
def test_a_horizon_between_two_steps_is_refused_as_written(tmp_path, capsys, horizons, value):
    trace = _hourly(tmp_path)
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace), "--horizons", horizons]))
    assert line.startswith(f"gputide: error: {trace}: field '--horizons': invalid value '{value}'; allowed: "
                           "multiples of the trace's step (3600s)"), line


def test_a_horizon_under_a_step_is_refused_as_written(tmp_path, capsys):
    trace = _hourly(tmp_path)
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace), "--horizons", "1h,30min"]))
    assert "field '--horizons': invalid value '30min'; allowed: durations of at least one step (3600s)" in line


def test_a_horizon_off_a_step_given_is_refused_naming_that_step(tmp_path, capsys):
    trace = _hourly(tmp_path)
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace), "--step", "40min", "--horizons", "1h"]))
    assert "invalid value '1h'; allowed: multiples of the trace's step (2400s)" in line and "--step resamples" \
        not in line


def test_the_step_is_shown_exactly(tmp_path, capsys):
    """A trace's own step of 600.000002 s was shown as 600s by :g, a step the horizon seems a multiple of."""
    trace = tmp_path / "halfus.csv"
    trace.write_text("timestamp,value\n2024-01-01T00:00:00.000000Z,1\n2024-01-01T00:10:00.000001Z,2\n"
                     "2024-01-01T00:20:00.000003Z,3\n")
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace), "--horizons", "65min"]))
    assert ("invalid value '65min'; allowed: multiples of the trace's step (600.000002s); --step resamples the "
            "trace to another") in line


@pytest.mark.parametrize(("horizons", "message"), [
    ([5400.0, 9000.0], "horizon 90min: allowed are multiples of the trace's step (3600s)"),
    ([1800.0], "horizon 30min: allowed are durations of at least one step (3600s)")])
def test_the_library_refuses_a_horizon_between_two_steps(horizons, message):
    with pytest.raises(ValueError) as caught:
        backtest(_series(3600, 400), models=["persistence"], horizons_s=horizons, min_train_days=3)
    assert str(caught.value) == message


def test_the_library_refuses_two_horizons_of_the_same_steps():
    """Only the CLI refused them: 3600 and 3600.3 s on 10-minute steps were two identical rows, both '1h'."""
    with pytest.raises(ValueError) as caught:
        backtest(_series(600, 2000), models=["persistence"], horizons_s=[3600, 3600.3], min_train_days=3)
    assert str(caught.value) == "horizon 3600.3s: allowed are horizons of different numbers of steps (600s): 1h is " \
        "as many"


def test_rows_are_labelled_with_the_horizon_asked_for(tmp_path, capsys):
    """Labels rounded to the second printed 2.5 s and 7.5 s horizons on 2.5 s steps as '2s' and '8s' (review s35r3
    of 9d34899b); the rows, the plotted paths and the baselines' errors are keyed by the horizon as asked."""
    _, details = backtest(_series(2.5, 400), models=["persistence"], horizons_s=[2.5, 7.5], min_train_days=0.001,
                          keep_paths=True)
    assert sorted(details["paths"]) == [("persistence", "2.5s"), ("persistence", "7.5s")]
    assert sorted(details["baseline_mae"]) == [f"{b}@{h}" for b in sorted(BASELINES) for h in ("2.5s", "7.5s")]
    path = tmp_path / "half.csv"
    path.write_text("timestamp,value\n" + "".join(f"{2.5 * i},{1 + i % 5}\n" for i in range(400)))
    out, cmd = tmp_path / "out.json", [*BACKTEST[:-1], "0.001", "--trace", str(path)]
    assert main(cmd + ["--horizons", "2.5s,7.5s", "--json", str(out)]) == 0, capsys.readouterr().err
    assert [r["horizon"] for r in json.loads(out.read_text())["scores"]] == ["2.5s", "7.5s"]
    capsys.readouterr()
    line = _one_error(capsys, main(cmd + ["--horizons", "1002.5s"]))   # 401 steps, 365 left after the first origin
    assert "horizon 1002.5s reaches past the trace's end" in line and "longest horizon 912.5s" in line, line


def test_a_trace_whose_own_step_is_read_off_jittered_times_still_scores_whole_hours(tmp_path, capsys):
    """On a trace's own step read off jittered times (600.000089 s), 1h is 5.99999 steps: it is scored as six
    (STEP_SLACK), not refused as between two steps, and its row reads 1h, as asked."""
    path = _jittered(tmp_path)
    out = tmp_path / "out.json"
    assert main(BACKTEST + ["--trace", str(path), "--horizons", "10min,1h,4h", "--json", str(out)]) == 0, \
        capsys.readouterr().err
    rows = json.loads(out.read_text())["scores"]
    assert sorted({r["horizon"] for r in rows}) == ["10min", "1h", "4h"]   # not 3600s, 14400s
    capsys.readouterr()
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(path), "--horizons", "65min"]))   # 6.5 steps
    assert "invalid value '65min'; allowed: multiples of the trace's step (600.000089s)" in line, line


@pytest.mark.parametrize(("horizons", "value"), [("24h,24h1min", "24h1min"), ("1h,1h1s", "1h1s")])
def test_the_slack_does_not_grow_with_the_horizon(tmp_path, capsys, horizons, value):
    """A slack of 0.1% of the horizon's steps took any horizon past 500 steps: 24h and 24h1min on 10-minute steps
    were two identical '24h' rows (audit s35a12)."""
    path = tmp_path / "ten.csv"
    path.write_text("timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(2000)))
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(path), "--horizons", horizons]))
    assert f"invalid value '{value}'; allowed: multiples of the trace's step (600s)" in line, line


def test_two_horizons_of_the_same_steps_are_refused(tmp_path, capsys):
    path = _jittered(tmp_path)
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(path), "--horizons", "1h,1h0.1s"]))
    assert "invalid value '1h0.1s'; allowed: horizons of different numbers of steps (600.000089s): 1h is as many" \
        in line, line


@pytest.mark.parametrize(("trace", "longest"), [
    (_jittered, "longest horizon 15670min, the 1567 steps of 600.000089s from there to the trace's end"),
    (lambda tmp_path: _hourly(tmp_path), "longest horizon 327h, the 327 steps of 1h from there to the trace's end")],
    ids=["jittered 10-minute steps", "hourly steps"])
def test_the_longest_horizon_that_fits_reads_as_a_horizon_to_type_and_its_steps(tmp_path, capsys, trace, longest):
    """It printed the steps times a jittered step, "longest horizon 940200s" (:g of 940200.14), and never said it
    was a count of steps: 15670min, typed, is those 1567 steps (`STEP_SLACK`)."""
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace(tmp_path)), "--horizons", "1000h"]))
    assert "horizon 1000h reaches past the trace's end from every scored origin" in line and longest in line, line
