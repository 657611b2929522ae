"""A bad timestamp column is parsed once to find the cell to blame, not cell by cell (audit s37a9 item 4).

Before: `_bad_time` asked of every cell in turn whether it was an ISO-8601 time: a 200,000-row ISO-8601 column with
one epoch number on row 2 took 12.9 s to exit 2. Counted here by the calls to pandas' parser, not by a clock (the
per-cell check, and its calls, went in session 39: it was only a fallback for an error a coerced parse never
raises); the messages are those of tests/forecast/test_traces_bad_time_row_s37.py.
"""

from __future__ import annotations

import pandas as pd
import pytest

from balancer.errors import InputError
from balancer.forecast import traces

START = pd.Timestamp("2024-01-01T00:00:00Z")


@pytest.mark.parametrize("at, bad, allowed", [
    pytest.param(0, "1704067200", f"{traces.ISO_OR_EPOCH}, one of them in the whole column", id="an epoch number"),
    pytest.param(1999, "abc", traces.ISO_OR_EPOCH, id="a word on the last row"),
])
def test_an_iso_column_with_one_bad_cell_is_parsed_once(monkeypatch, at, bad, allowed):
    calls = []
    parse = pd.to_datetime
    monkeypatch.setattr(traces.pd, "to_datetime", lambda *a, **k: calls.append(a) or parse(*a, **k))
    cells = [(START + pd.Timedelta(minutes=i)).isoformat() for i in range(2000)]
    cells[at] = bad
    with pytest.raises(InputError) as info:
        traces.to_utc(pd.Series(cells, dtype=object), "t.csv", "timestamp")
    assert str(info.value) == f"t.csv: field 'timestamp': invalid value '{bad}'; allowed: {allowed} (row {at + 2})"
    assert len(calls) < 10, len(calls)
