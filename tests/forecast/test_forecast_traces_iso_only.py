"""Trace timestamps are ISO-8601 or epoch seconds, as the README says, never pandas' guess at a format.

Before: `to_utc` parsed with `format="mixed"`, which read a day-first 01/02/2024 as 2 January and 13/01/2024 as
13 January: a day-first export loaded as a trace months long, scrambled, and backtested with exit 0.
"""

from __future__ import annotations

import pandas as pd
import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import to_utc

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "0.1", "--horizons", "1h"]
ALLOWED = "ISO-8601 (e.g. 2024-01-01T00:00:00Z) or epoch seconds"


def _day_first(days: int = 14) -> str:
    return "timestamp,value\n" + "".join(f"{d:02d}/01/2024 {h:02d}:00,{10 + h % 5}\n"
                                         for d in range(1, days + 1) for h in range(24))


def test_a_day_first_trace_exits_2_naming_file_field_value_and_what_is_allowed(tmp_path, capsys):
    trace = tmp_path / "dayfirst.csv"
    trace.write_text(_day_first())
    code = main(BACKTEST + ["--trace", str(trace)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == (f"gputide: error: {trace}: field 'timestamp': invalid value '01/01/2024 00:00'; "
                           f"allowed: {ALLOWED} (row 2)"), err


def test_a_day_first_calibration_history_exits_2(tmp_path, capsys):
    history = tmp_path / "calib.csv"
    history.write_text("timestamp,demand_rps,replicas,p99_s\n13/01/2024 00:00,1,1,0.2\n13/01/2024 00:01,1,1,0.2\n")
    code = main(["calibrate", "--csv", str(history), "--service", "chat", "--slo", "0.5"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert f"{history}: field 'timestamp': invalid value '13/01/2024 00:00'; allowed: {ALLOWED}" in err, err


@pytest.mark.parametrize("cells", [["2024-01-02T00:00:00Z", "01/02/2024 00:10Z"],
                                   ["2024-01-02 00:00", "02.01.2024 00:10"], ["2024-01-02 00:00:00 CET"],
                                   ["Jan 2 2024 00:00"]],
                         ids=["a day-first row among ISO ones", "dots", "a zone abbreviation", "month name"])
def test_a_time_not_in_iso_8601_is_refused_naming_its_row(cells):
    with pytest.raises(InputError) as info:
        to_utc(pd.Series(cells), "t.csv", "timestamp")
    assert (info.value.file, info.value.field, info.value.value) == ("t.csv", "timestamp", cells[-1])
    assert info.value.allowed == ALLOWED
    assert info.value.detail == f"row {len(cells) + 1}"


@pytest.mark.parametrize(("cell", "utc"), [
    ("2024-01-02T00:00:00Z", "2024-01-02T00:00:00"), ("2024-01-02T01:00:00+01:00", "2024-01-02T00:00:00"),
    ("2024-01-02T01:00:00+0100", "2024-01-02T00:00:00"), ("2024-01-02 00:00:00", "2024-01-02T00:00:00"),
    ("2024-01-02T00:00:00.25Z", "2024-01-02T00:00:00.25"), ("2024-01-02T00:00", "2024-01-02T00:00:00"),
    ("2024-01-02", "2024-01-02T00:00:00"), ("2024-01-02 00:00:00 UTC", "2024-01-02T00:00:00"),
    ("2024-01-02T00:00:00z", "2024-01-02T00:00:00"), ("1704153600", "2024-01-02T00:00:00"),
])
def test_the_iso_forms_and_epoch_seconds_still_read(cell, utc):
    assert to_utc(pd.Series([cell]), "t.csv", "timestamp")[0] == pd.Timestamp(utc, tz="UTC")


def test_epoch_seconds_with_an_empty_cell_name_that_row_not_the_first():
    with pytest.raises(InputError) as info:
        to_utc(pd.Series([1704067200.0, float("nan"), 1704067800.0]), "t.csv", "timestamp")
    assert info.value.detail == "row 3" and info.value.allowed == ALLOWED + " (a time on every row)"


@pytest.mark.parametrize(("cell", "utc"), [
    ("2024-01-02t00:00:00z", "2024-01-02T00:00:00"), ("2024-01-02t01:00:00+01:00", "2024-01-02T00:00:00"),
    ("2024-01-02 00:00:00,123", "2024-01-02T00:00:00.123"), ("2024-01-02T00:00:00,5Z", "2024-01-02T00:00:00.5"),
    ("2024-01-02t00:00:00,25+01:00", "2024-01-01T23:00:00.25"),
])
def test_a_lower_case_t_and_a_comma_fraction_read(cell, utc):
    """RFC 3339 allows a lower-case t, ISO-8601 a comma before the fraction (Python logging's asctime writes one):
    the old format='mixed' read both, format='ISO8601' refused them (exit 2)."""
    assert to_utc(pd.Series([cell]), "t.csv", "timestamp")[0] == pd.Timestamp(utc, tz="UTC")


def test_a_comma_fraction_with_a_zone_counts_as_zoned():
    """Beside `...:01Z`, a `...:00,123Z` is no naive time: the file names its zone on every row."""
    cells = ["2024-01-02T00:00:00,123Z", "2024-01-02T00:00:01Z"]
    assert list(to_utc(pd.Series(cells), "t.csv", "timestamp")) == [
        pd.Timestamp("2024-01-02T00:00:00.123Z"), pd.Timestamp("2024-01-02T00:00:01Z")]


def test_a_logging_style_trace_backtests(tmp_path, capsys):
    """Through the CLI: a trace whose times Python's logging wrote (quoted for their comma) is backtested."""
    trace = tmp_path / "log.csv"
    trace.write_text("timestamp,value\n" + "".join(f'"2024-01-{1 + h // 24:02d} {h % 24:02d}:00:00,000",{10 + h % 5}\n'
                                                   for h in range(24 * 3)))   # quoted, as a CSV writer quotes it
    code = main(BACKTEST + ["--trace", str(trace)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
