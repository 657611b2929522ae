"""An ISO time outside 1970-2100 (a mistyped year) is refused naming the file, the column, the value and the row.

Epoch seconds were range-checked, ISO times not: a year 0224 for 2024 in one row was an OutOfBoundsDatetime
traceback (exit 1) in `forecast backtest`, an error blaming field 'step' with `--format requests`, and was accepted
by `calibrate`; 2204 for 2024 stretched a week's trace over 1.5 million hourly steps and the backtest hung."""

from __future__ import annotations

import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "0.1", "--horizons", "1h"]


def _hourly(rows: int, typo_row: int, year: str) -> tuple[str, str]:
    """A `timestamp,value` body of hourly rows; row `typo_row` (1-based data row) has `year` for 2024."""
    lines, bad = [], ""
    for i in range(rows):
        stamp = f"2024-01-{1 + i // 24:02d}T{i % 24:02d}:00:00+00:00"
        if i + 1 == typo_row:
            stamp = bad = year + stamp[4:]
        lines.append(stamp)
    return "\n".join(lines) + "\n", bad


def _one_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    return lines[0]


@pytest.mark.parametrize("year", ["0224", "9999"])   # 2204, 1900: below, without the backtest (it hung)
def test_a_csv_trace_with_a_year_outside_1970_to_2100_exits_2(tmp_path, capsys, year):
    stamps, bad = _hourly(72, 50, year)
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{s},{10 + i % 5}\n" for i, s in enumerate(stamps.split())))
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace)]))
    assert line.startswith(f"gputide: error: {trace}: field 'timestamp': invalid value '{bad}'"), line
    assert "from 1970 to 2100" in line and "(row 51)" in line, line


@pytest.mark.parametrize("year", ["2204", "1900"])
def test_a_typo_year_within_pandas_range_does_not_stretch_the_trace(tmp_path, year):
    stamps, _ = _hourly(72, 50, year)
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{s},1\n" for s in stamps.split()))
    with pytest.raises(InputError, match=rf"field 'timestamp'.*'{year}-01-03.*from 1970 to 2100.*row 51"):
        load_demand(trace, "csv")


def test_a_requests_trace_with_a_typo_year_names_the_timestamp_not_the_step(tmp_path, capsys):
    stamps, bad = _hourly(72, 40, "0224")
    trace = tmp_path / "requests.csv"
    trace.write_text("timestamp\n" + stamps)
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace), "--format", "requests"]))
    assert line.startswith(f"gputide: error: {trace}: field 'timestamp': invalid value '{bad}'"), line
    assert "(row 41)" in line and "'step'" not in line, line


def test_a_calibration_history_with_a_typo_year_exits_2(tmp_path, capsys):
    stamps, bad = _hourly(60, 30, "0224")
    history = tmp_path / "calib.csv"
    history.write_text("timestamp,demand_rps,replicas,p99_s\n"
                       + "".join(f"{s},{20 + i % 7},{2 + i % 2},0.3\n" for i, s in enumerate(stamps.split())))
    line = _one_error(capsys, main(["calibrate", "--csv", str(history), "--service", "s1", "--slo", "0.5"]))
    assert line.startswith(f"gputide: error: {history}: field 'timestamp': invalid value '{bad}'"), line
    assert "(row 31)" in line, line

