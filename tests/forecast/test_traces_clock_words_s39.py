"""A `now` or `today` timestamp is a bad time, refused naming its row (review r5).

Before: pandas' ISO-8601 parser reads the words `now` and `today` as the wall clock, so a trace with such a cell
without a zone loaded (exit 0) with one sample stamped at the hour the file was read, years past the rest of the
trace; among times naming their zone, the word was said to name none, among epoch seconds to be the odd form out.
"""

from __future__ import annotations

import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand

ALLOWED = "ISO-8601 (e.g. 2024-01-01T00:00:00Z) or epoch seconds"


@pytest.mark.parametrize("word", ["now", "today"])
@pytest.mark.parametrize("fmt, header, rows", [
    pytest.param("csv", "timestamp,value", ["2024-01-01T00:00:00Z,5", "{w},6", "2024-01-01T00:02:00Z,7"],
                 id="csv among ISO times"),
    pytest.param("csv", "timestamp,value", ["2024-01-01T00:00:00,5", "{w},6", "2024-01-01T00:02:00,7"],
                 id="csv among ISO times without a zone"),
    pytest.param("csv", "timestamp,value", ["1704067200,5", "{w},6", "1704067320,7"], id="csv among epoch seconds"),
    pytest.param("requests", "timestamp", ["2024-01-01T00:00:00Z", "{w}", "2024-01-01T00:02:00Z"],
                 id="requests log"),
])
def test_a_clock_word_is_refused_naming_its_row(tmp_path, word, fmt, header, rows):
    path = tmp_path / "trace.csv"
    path.write_text("\n".join([header, *(r.format(w=word) for r in rows)]) + "\n")
    with pytest.raises(InputError) as info:
        load_demand(path, fmt)
    assert str(info.value) == f"{path}: field 'timestamp': invalid value '{word}'; allowed: {ALLOWED} (row 3)"
