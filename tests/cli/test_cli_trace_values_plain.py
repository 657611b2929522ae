"""A bad cell of a trace or calibration CSV is shown as written (-1, 1e+300, True), not as numpy's repr.

Before: the messages showed `np.int64(-1)`, `np.float64(1e+300)` and `np.True_`, the repr of the numpy scalar
pandas read, which is no value the file holds.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "0.1", "--horizons", "1h"]


@pytest.mark.parametrize(("fmt", "text", "field", "shown"), [
    ("csv", "timestamp,value\n0,-1\n600,2\n", "value", "-1"),
    ("csv", "timestamp,value\n0,1e300\n600,2\n", "value", "1e+300"),
    ("csv", "timestamp,value\n0,1\n-600,2\n", "timestamp", "-600"),
    ("csv", "timestamp,value\n0,1\n0,2\n", "timestamp", "0"),
    ("requests", "timestamp\nTrue\nFalse\n", "timestamp", "True"),
], ids=["negative demand", "huge demand", "negative epoch", "repeated epoch", "true/false times"])
def test_a_bad_trace_cell_is_shown_as_written(tmp_path, capsys, fmt, text, field, shown):
    trace = tmp_path / "trace.csv"
    trace.write_text(text)
    code = main(BACKTEST + ["--trace", str(trace), "--format", fmt])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{trace}: field '{field}': invalid value {shown};" in err and "np." not in err, err


def test_a_bad_calibration_cell_is_shown_as_written(tmp_path, capsys):
    history = tmp_path / "calib.csv"
    history.write_text("timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n60,1,-2.0,0.2\n")
    code = main(["calibrate", "--csv", str(history), "--service", "chat", "--slo", "0.5"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{history}: field 'replicas': invalid value -2.0;" in err and "np." not in err, err
