"""Malformed demand traces exit 2 with one line naming the file, the field, the value and what is allowed.

Before: a timestamp column of True/False was a pandas TypeError traceback (backtest and calibrate); a file mixing
times that name their zone with times that do not read the naive ones as UTC, shifting them by the writer's
offset; a trace with no observed demand ran every model on NaN and printed NaN scores under numpy warnings; a
ServeGen --origin past pandas' year 2262 was an OutOfBoundsDatetime traceback.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "0.1", "--horizons", "1h"]
ZONES = "".join(f"2024-01-01T{h:02d}:00:00{'' if h % 2 else 'Z'},1\n" for h in range(24))


def _one_error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("gputide: error: "), err
    assert "Traceback" not in err and "allowed: " in lines[0], err
    return lines[0]


@pytest.mark.parametrize("fmt, text, field, value", [
    pytest.param("csv", "timestamp,value\nTrue,1\nFalse,2\n", "timestamp", "True", id="csv: true/false times"),
    pytest.param("csv", "timestamp,value\n" + ZONES, "timestamp", "'2024-01-01T01:00:00'",
                 id="csv: zoned and naive times mixed"),
    pytest.param("requests", "timestamp\n2024-01-01T00:00:00+05:00\n2024-01-01T06:00:00\n2024-01-02T00:00:00\n",
                 "timestamp", "'2024-01-01T06:00:00'", id="requests: zoned and naive times mixed"),
    pytest.param("csv", "timestamp,value\n" + "".join(f"{600 * i},\n" for i in range(300)), "value",
                 "0 observed steps", id="csv: no demand observed"),
])
def test_a_malformed_trace_exits_2_naming_file_field_and_value(tmp_path, capsys, fmt, text, field, value):
    trace = tmp_path / "trace.csv"
    trace.write_text(text)
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace), "--format", fmt]))
    assert line.startswith(f"gputide: error: {trace}: field '{field}': invalid value ") and value in line, line


def test_a_calibration_history_with_true_false_times_exits_2(tmp_path, capsys):
    history = tmp_path / "calib.csv"
    history.write_text("timestamp,demand_rps,replicas,p99_s\nTrue,1,1,0.2\nFalse,1,1,0.2\n")
    line = _one_error(capsys, main(["calibrate", "--csv", str(history), "--service", "chat", "--slo", "0.5"]))
    assert line.startswith(f"gputide: error: {history}: field 'timestamp': invalid value "), line


@pytest.mark.parametrize("origin", ["9999-01-01", "NaT", "now", "today", " Now "])
def test_a_servegen_origin_outside_1970_to_2100_exits_2(tmp_path, capsys, origin):
    folder = tmp_path / "servegen"
    folder.mkdir()
    (folder / "chat.csv").write_text("".join(f"{600 * i},{1 + i % 3},1.0,Gamma,1,2\n" for i in range(300)))
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(folder), "--format", "servegen", "--origin", origin]))
    assert line.startswith(f"gputide: error: {folder}: field 'origin': invalid value '{origin}'"), line
    assert "from 1970 to 2100" in line, line
