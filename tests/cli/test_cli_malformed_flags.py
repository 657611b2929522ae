"""Command-line values that were tracebacks exit 2 with one line naming the flag, the value and what is allowed.

Before: `simulate --scenario tidal --days` shorter than one step of the trace (10 minutes) took the window's
start from one past the trace's end, an IndexError; `dashboards build --out` naming a file was a FileExistsError
from mkdir.
"""

from __future__ import annotations

import pytest

from balancer.cli import main


def _one_error(capsys, code: int, field: str, value: str) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in err, err
    assert f"field '{field}': invalid value {value}; allowed: " in lines[0], lines
    return lines[0]


@pytest.mark.parametrize("days", ["0.001", "0.003"])
def test_a_tidal_window_shorter_than_one_trace_step_exits_2(tmp_path, capsys, days):
    out = tmp_path / "out"
    code = main(["simulate", "--scenario", "tidal", "--policy", "none", "--no-plots", "--out", str(out),
                 "--days", days])
    line = _one_error(capsys, code, "--days", days)
    assert "at least one step of the trace" in line
    assert not out.exists()


@pytest.mark.parametrize("where", ["file", "file/sub"])
def test_dashboards_build_into_a_file_exits_2(tmp_path, capsys, where):
    (tmp_path / "file").write_text("not a folder")
    target = str(tmp_path / where)
    line = _one_error(capsys, main(["dashboards", "build", "--out", target]), "--out", repr(target))
    assert "a folder" in line


def test_min_train_days_past_half_the_trace_exits_2(tmp_path, capsys):
    """The backtest scores from at most half the trace: `--min-train-days 1000` on a two-day trace was cut to one
    day without a word."""
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(300)))
    code = main(["forecast", "backtest", "--trace", str(trace), "--models", "persistence", "--horizons", "1h",
                 "--min-train-days", "1000"])
    line = _one_error(capsys, code, "--min-train-days", "1000.0")
    assert line.startswith(f"gputide: error: {trace}: ") and "at most half the trace's span (1.042 days)" in line


@pytest.mark.parametrize("horizons", ["8d", "1h,8d"])
def test_a_horizon_past_the_trace_end_exits_2_naming_the_longest_that_fits(tmp_path, capsys, horizons):
    """Only a horizon too long for the trace asked for said 'series too short for a backtest', not which horizon
    fits; asked with a shorter one, it named the longest. Both name it now."""
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(2016)))
    code = main(["forecast", "backtest", "--trace", str(trace), "--models", "persistence", "--horizons", horizons])
    assert code == 2
    err = capsys.readouterr().err
    assert "horizon 192h reaches past the trace's end" in err and "longest horizon 10070min" in err, err
