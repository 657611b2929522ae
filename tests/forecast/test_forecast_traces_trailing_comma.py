"""A trailing comma on every row of a trace or calibration CSV reads as written; a value past the header is refused.

Before: pandas took the extra field on every row for an index, so each value was read under the next column's
name: a trace's demand became its times and its values were empty (exit 2 'no demand observed', or a repeated
time), and calibrate --csv read demand as the time, replicas as demand and p99 as replicas, with no p99 at all.
"""

from __future__ import annotations

import numpy as np
import pytest

from balancer.cli import main
from balancer.cmd.calibrate import from_csv
from balancer.errors import InputError
from balancer.forecast.traces import load_demand


def _write(path, text: str):
    path.write_text(text)
    return path


def test_a_trace_with_a_trailing_comma_on_every_row_reads_its_values(tmp_path):
    rows = "".join(f"2024-01-01T{h:02d}:00:00Z,{10 + h},\n" for h in range(6))
    y = load_demand(_write(tmp_path / "t.csv", "timestamp,value\n" + rows), "csv")
    assert y.tolist() == [10.0, 11.0, 12.0, 13.0, 14.0, 15.0]
    assert str(y.index[0]) == "2024-01-01 00:00:00+00:00"


def test_a_requests_file_with_a_trailing_comma_counts_each_request(tmp_path):
    rows = "".join(f"{60 * i},\n" for i in range(5))
    y = load_demand(_write(tmp_path / "r.csv", "timestamp\n" + rows), "requests", step="1min")
    assert (y * 60).tolist()[:-1] == [1.0] * 4 and np.isnan(y.iloc[-1])   # the last step: the log ends at its start


def test_a_calibration_history_with_a_trailing_comma_reads_each_column(tmp_path):
    text = "timestamp,demand_rps,replicas,p99_s\n" + "".join(f"{60 * i},{10 + i},2,0.3,\n" for i in range(3))
    frame = from_csv(str(_write(tmp_path / "c.csv", text)))
    assert frame["t"].tolist() == [0.0, 60.0, 120.0] and frame["demand"].tolist() == [10.0, 11.0, 12.0]
    assert frame["replicas"].tolist() == [2.0] * 3 and frame["p99"].tolist() == [0.3] * 3


@pytest.mark.parametrize(("text", "line", "value"), [
    ("timestamp,value\n0,1,5\n600,2,6\n", 2, "0,1,5"),
    ("timestamp,value\n0,1,\n600,2,7\n", 3, "600,2,7"),
], ids=["every row", "a later row"])
def test_a_value_past_the_header_is_refused_naming_its_line(tmp_path, text, line, value):
    path = _write(tmp_path / "t.csv", text)
    with pytest.raises(InputError) as info:
        load_demand(path, "csv")
    assert (info.value.file, info.value.field, info.value.value) == (str(path), f"row {line}", value)
    assert info.value.allowed == "at most 2 fields, one per column of the header (timestamp,value)"


def test_a_field_past_the_csv_modules_limit_is_refused_naming_its_row(tmp_path, capsys):
    """A row longer than the header is read again by the csv module, whose fields stop at 131072 characters (pandas'
    have no limit): one longer escaped as a _csv.Error traceback, exit 1 (audit a6). The scan now lifts that limit,
    so the row is refused for its fields, shown shortened (audit s32y1)."""
    path = _write(tmp_path / "t.csv", "timestamp,value\n2024-01-01T00:00:00Z,5,\n2024-01-01T01:00:00Z,6,"
                  + "y" * 200_000 + "\n2024-01-01T02:00:00Z,7,\n")
    with pytest.raises(InputError) as info:
        load_demand(path, "csv")
    assert (info.value.file, info.value.field) == (str(path), "row 3")
    assert info.value.value == "2024-01-01T01:00:00Z,6," + "y" * 177 + "... (200023 characters)"
    assert info.value.allowed == "at most 2 fields, one per column of the header (timestamp,value)"
    code = main(["forecast", "backtest", "--models", "persistence", "--trace", str(path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"gputide: error: {path}: field 'row 3': "), err


@pytest.mark.parametrize(("text", "line", "value", "detail"), [
    ("timestamp,value\n0,1\n600,2\n1200,3,\n", 4, "1200,3,", "3 fields, where the header has 2 and the first row 2"),
    ("timestamp,value\n0,1,\n600,2,,\n", 3, "600,2,,", "4 fields, where the header has 2 and the first row 3"),
], ids=["a later row only", "one more on a later row"])
def test_a_trailing_comma_on_some_rows_only_is_refused_naming_the_row(tmp_path, capsys, text, line, value, detail):
    """pandas refuses a row with more fields than the first: the message was 'a readable UTF-8 CSV (Error
    tokenizing data. C error: ...)', which the README's 'a trailing comma on every row is fine' left unexplained."""
    path = _write(tmp_path / "t.csv", text)
    with pytest.raises(InputError) as info:
        load_demand(path, "csv")
    assert (info.value.file, info.value.field, info.value.value) == (str(path), f"row {line}", value)
    assert info.value.allowed == ("as many fields on every row, one per column of the header (timestamp,value): "
                                  "a trailing comma on every row or on none")
    assert info.value.detail == detail
    code = main(["forecast", "backtest", "--models", "persistence", "--trace", str(path)])
    assert code == 2 and f"field 'row {line}'" in capsys.readouterr().err


def test_a_value_past_the_header_on_a_later_row_only_names_that_row(tmp_path):
    path = _write(tmp_path / "t.csv", "timestamp,value\n0,1\n600,2,x\n1200,3\n")
    with pytest.raises(InputError) as info:
        load_demand(path, "csv")
    assert (info.value.field, info.value.value) == ("row 3", "600,2,x")
    assert info.value.allowed == "at most 2 fields, one per column of the header (timestamp,value)"
