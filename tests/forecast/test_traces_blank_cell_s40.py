"""A blank timestamp cell (only whitespace) is an empty cell in every column of times, ISO-8601 or epoch seconds
(audit a6 of 343adaa3).

Before: `_only_numbers` took a blank cell for an empty one, but the ISO-8601 parse took it for bad text. In
`1704067200, ' ', abc` the refusal named the blank on row 3 rather than `abc` on row 4 (the wrong blame 343adaa3 fixed
for an empty string); in a column of ISO-8601 times a blank was refused as a bad time, without the '(a time on every
row)' that a blank among epoch seconds (and an empty cell anywhere) is refused with; and it counted among the ISO-8601
cells when the less common of two forms mixed in a column was named."""

from __future__ import annotations

import pytest

from balancer.errors import InputError
from balancer.forecast.traces import ISO_OR_EPOCH, load_demand

EVERY_ROW = f"allowed: {ISO_OR_EPOCH} (a time on every row)"
ONE_FORM = f"allowed: {ISO_OR_EPOCH}, one of them in the whole column"
FORMATS = [
    pytest.param("csv", "timestamp,value", lambda t, i: f"{t},{i}", id="csv"),
    pytest.param("requests", "timestamp,path", lambda t, i: f"{t},/v1/{i}", id="requests"),
]


def _refusal(tmp_path, fmt, header, row_of, times) -> str:
    path = tmp_path / "trace.csv"
    path.write_text(header + "\n" + "".join(row_of(t, i) + "\n" for i, t in enumerate(times)))
    with pytest.raises(InputError) as info:
        load_demand(path, fmt)
    message = str(info.value)
    assert str(path) in message and "field 'timestamp'" in message, message
    return message


@pytest.mark.parametrize("fmt, header, row_of", FORMATS)
@pytest.mark.parametrize("times", [
    pytest.param(["1704067200", " ", "abc"], id="epoch, blank, abc"),
    pytest.param(["2024-01-01T00:00:00Z", " ", "abc"], id="ISO, blank, abc"),
    pytest.param(["2024-01-01T00:00:00Z", "\t ", "abc", "2024-01-01T00:02:00Z"], id="ISO, tab, abc, ISO"),
])
def test_the_bad_time_after_a_blank_cell_is_named(tmp_path, fmt, header, row_of, times):
    message = _refusal(tmp_path, fmt, header, row_of, times)
    assert f"invalid value 'abc'; allowed: {ISO_OR_EPOCH} (row 4)" in message, message


@pytest.mark.parametrize("fmt, header, row_of", FORMATS)
def test_a_blank_cell_is_refused_as_an_empty_one_in_either_form(tmp_path, fmt, header, row_of):
    iso = _refusal(tmp_path, fmt, header, row_of, ["2024-01-01T00:00:00Z", " ", "2024-01-01T00:02:00Z"])
    epoch = _refusal(tmp_path, fmt, header, row_of, ["1704067200", " ", "1704067320"])
    for message in (iso, epoch):
        assert f"invalid value ' '; {EVERY_ROW} (row 3)" in message, message


@pytest.mark.parametrize("fmt, header, row_of", FORMATS)
def test_a_blank_cell_is_no_iso_time_when_the_less_common_form_is_named(tmp_path, fmt, header, row_of):
    """One ISO-8601 time, two epoch numbers: ISO-8601 is the less common form, the blank cell counted with neither."""
    times = ["2024-01-01T00:00:00Z", " ", "1704067260", "1704067320"]
    message = _refusal(tmp_path, fmt, header, row_of, times)
    assert f"invalid value '2024-01-01T00:00:00Z'; {ONE_FORM} (row 2)" in message, message
