"""A bad timestamp is blamed on its own row, whatever form the column's other times take.

Before: `to_utc` named the first cell that was not ISO-8601: in a column of epoch seconds with `abc` (or `12:00`) on
row 51, that was the first time, `0` on row 2, a valid one; a column mixing the two forms named its first cell too.
The ISO-8601 column with a bad cell was already named right: kept here as the other shape of the same rule.
"""

from __future__ import annotations

import pandas as pd
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import to_utc

ALLOWED = "ISO-8601 (e.g. 2024-01-01T00:00:00Z) or epoch seconds"
START = pd.Timestamp("2024-01-01T00:00:00Z")


def _epoch(bad: str, at: int = 49) -> list[str]:
    cells = [str(600 * i) for i in range(100)]
    cells[at] = bad
    return cells


def _iso(bad: str, at: int = 49) -> list[str]:
    cells = [(START + pd.Timedelta(minutes=10 * i)).strftime("%Y-%m-%dT%H:%M:%SZ") for i in range(100)]
    cells[at] = bad
    return cells


@pytest.mark.parametrize("cells, value", [
    pytest.param(_epoch("abc"), "abc", id="epoch seconds, a word"),
    pytest.param(_epoch("12:00"), "12:00", id="epoch seconds, a time of day"),
    pytest.param(_epoch("2024-13-01T00:00:00Z"), "2024-13-01T00:00:00Z", id="epoch seconds, a bad ISO time"),
    pytest.param(_iso("abc"), "abc", id="ISO-8601, a word"),
    pytest.param(_iso("12:00"), "12:00", id="ISO-8601, a time of day"),
])
def test_the_bad_cell_and_its_row_are_named(cells, value):
    with pytest.raises(InputError) as info:
        to_utc(pd.Series(cells, dtype=object), "t.csv", "timestamp")
    assert str(info.value) == f"t.csv: field 'timestamp': invalid value '{value}'; allowed: {ALLOWED} (row 51)"


@pytest.mark.parametrize("cells, value", [
    pytest.param(_epoch("2024-01-01T08:10:00Z"), "2024-01-01T08:10:00Z", id="an ISO time among epoch seconds"),
    pytest.param(_iso("1704096600"), "1704096600", id="epoch seconds among ISO times"),
])
def test_a_column_mixing_both_forms_names_the_odd_one_out(cells, value):
    with pytest.raises(InputError) as info:
        to_utc(pd.Series(cells, dtype=object), "t.csv", "timestamp")
    assert str(info.value) == (f"t.csv: field 'timestamp': invalid value '{value}'; allowed: {ALLOWED}, one of "
                               "them in the whole column (row 51)")


def test_an_empty_cell_is_not_the_one_blamed():
    cells = _epoch("abc")
    cells[3] = None
    with pytest.raises(InputError, match=r"invalid value 'abc'.*\(row 51\)"):
        to_utc(pd.Series(cells, dtype=object), "t.csv", "timestamp")
