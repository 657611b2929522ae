"""A column of epoch seconds with an empty cell and an epoch past 64 bits (for which pandas types the whole column
as objects, not numbers) is refused naming the oversized epoch, not its first, valid, time.

Before: only a column whose every cell was a number took the epoch-seconds branch; the empty cell sent this one to
ISO-8601, whose refusal blamed 1704067200 on row 2 (audit a9)."""

from __future__ import annotations

import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand

HUGE = "99999999999999999999999"


@pytest.mark.parametrize("rows, row", [
    pytest.param(f"1704067200,1\n,2\n{HUGE},3\n", 4, id="empty cell before the oversized epoch"),
    pytest.param(f"1704067200,1\n{HUGE},2\n,3\n1704067320,4\n", 3, id="empty cell after it"),
])
def test_the_oversized_epoch_is_named_not_a_valid_time(tmp_path, rows, row):
    path = tmp_path / "trace.csv"
    path.write_text("timestamp,value\n" + rows)
    with pytest.raises(InputError) as info:
        load_demand(path, "csv")
    message = str(info.value)
    assert f"invalid value {HUGE}" in message and f"(row {row})" in message
    assert "epoch seconds between 1970 and 2100" in message

