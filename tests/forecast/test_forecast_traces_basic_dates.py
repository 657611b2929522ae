"""A timestamp column of YYYYMMDD numbers (20240101: ISO-8601's basic date, as `date +%Y%m%d` writes it) is refused.

It read as epoch seconds: 20240101 s is 1970-08-23, consecutive days 1 s apart (100 s across a month boundary), and a
year of daily demand was silently squeezed into a few weeks of 1970 (exit 0). Epoch seconds of today are ten digits
and still read as epoch; a column of numbers that are not all dates (20240132) stays epoch seconds."""

from __future__ import annotations

import pandas as pd
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand


def _csv(tmp_path, stamps: list[str]) -> str:
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,value\n" + "".join(f"{s},{i + 1}\n" for i, s in enumerate(stamps)), encoding="utf-8")
    return str(path)


def test_yyyymmdd_numbers_are_refused_naming_file_column_value_and_row(tmp_path):
    days = [d.strftime("%Y%m%d") for d in pd.date_range("2024-01-01", periods=40, freq="D")]
    path = _csv(tmp_path, days)
    with pytest.raises(InputError) as caught:
        load_demand(path, "csv", "1D")
    message = str(caught.value)
    assert path in message and "timestamp" in message and "20240101" in message and "row 2" in message
    assert "2024-01-01" in message and "August 1970" in message


def test_epoch_seconds_and_numbers_that_are_not_all_dates_still_read_as_epoch(tmp_path):
    epoch = [str(1704067200 + 3600 * i) for i in range(48)]
    series = load_demand(_csv(tmp_path, epoch), "csv", "1h")
    assert series.index[0] == pd.Timestamp("2024-01-01", tz="UTC") and len(series) == 48
    not_dates = [str(20240101 + 31 * i) for i in range(3)]   # 20240132 is no date: epoch seconds, as before
    series = load_demand(_csv(tmp_path, not_dates), "csv", "1s")
    assert series.index[0] == pd.Timestamp(20240101, unit="s", tz="UTC")
