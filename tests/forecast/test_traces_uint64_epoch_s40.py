"""A column of epoch seconds with an empty cell and an epoch between 2**63 and 2**64 is refused naming the oversized
epoch (file, row, column, value, what is allowed), not the empty cell (session 40, item 4).

Before: beside such an integer pandas leaves the column as text and the empty cell as an empty string, not NaN; that
string counted as a cell given, which is no number, so the column went to ISO-8601, and the refusal named the empty
cell ('invalid value ''; allowed: ISO-8601 ... or epoch seconds') where the epoch past 2100 was the mistake. An epoch
past 2**64 (pandas reads the empty cell as NaN there) was named already (audit a9)."""

from __future__ import annotations

import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand

UINT64 = "18446744073709551000"   # over 2**63 - 1, under 2**64
INT64_PAST = "9223372036854775808"   # 2**63


@pytest.mark.parametrize("fmt, header, row_of", [
    pytest.param("csv", "timestamp,value", lambda t, v: f"{t},{v}", id="csv"),
    pytest.param("requests", "timestamp,path", lambda t, v: f"{t},/v1/{v}", id="requests"),
])
@pytest.mark.parametrize("times, row, huge", [
    pytest.param(["1704067200", "", UINT64, "1704067320"], 4, UINT64, id="empty cell before it"),
    pytest.param(["1704067200", UINT64, "", "1704067320"], 3, UINT64, id="empty cell after it"),
    pytest.param(["1704067200", "1704067260", "", INT64_PAST], 5, INT64_PAST, id="2**63, empty cell before it"),
])
def test_an_epoch_past_int64_beside_an_empty_cell_is_named(tmp_path, fmt, header, row_of, times, row, huge):
    path = tmp_path / "trace.csv"
    path.write_text(header + "\n" + "".join(row_of(t, v) + "\n" for v, t in enumerate(times)))
    with pytest.raises(InputError) as info:
        load_demand(path, fmt)
    message = str(info.value)
    assert str(path) in message and "field 'timestamp'" in message
    assert f"invalid value '{huge}'" in message and f"(row {row})" in message
    assert "allowed: epoch seconds between 1970 and 2100" in message
