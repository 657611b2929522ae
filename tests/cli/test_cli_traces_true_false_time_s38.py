"""A `True`/`False` cell in a column of times exits 2 with the message any bad time gets: file, row, column, value and
what is allowed (audit s38).

pandas reads a 4-column CSV in blocks of 131,072 rows: a block holding only True/False cells comes back as booleans
beside the text (or numbers) of the others. Before: to_numeric took them for 1 and 0, so beside ISO-8601 times the
column was said to mix ISO-8601 and epoch seconds ('one of them in the whole column'), and beside epoch seconds
`False` was a time in 1970 and the trace refused for its span at --step 1min, nothing naming the cell.
Since session 39 the file is typed at once (`read_rows`, no DtypeWarning): the cell is read as the text it is, and
named as any bad time is, quoted.
"""

from __future__ import annotations

import pandas as pd
import pytest

from balancer.cli import main
from balancer.forecast.traces import ISO_OR_EPOCH, read_rows

ROWS = 131_072   # pandas' block for a 4-column file: the cell after them is a block of its own


ISO = pytest.param(lambda i: (pd.Timestamp("2024-01-01T00:00:00Z") + pd.Timedelta(seconds=2 * i)).isoformat(),
                   id="ISO-8601 times")
EPOCH = pytest.param(lambda i: str(1704067200 + 2 * i), id="epoch seconds")


@pytest.mark.filterwarnings("error")
@pytest.mark.parametrize("time, word, fmt", [
    pytest.param(*ISO.values, "True", "requests", id="ISO-8601 times, True, requests"),
    pytest.param(*ISO.values, "False", "csv", id="ISO-8601 times, False, csv"),
    pytest.param(*EPOCH.values, "False", "requests", id="epoch seconds, False, requests"),
    pytest.param(*EPOCH.values, "True", "csv", id="epoch seconds, True, csv"),
])
def test_a_true_false_cell_among_times_is_named_as_a_bad_time(tmp_path, capsys, time, word, fmt):
    log = tmp_path / "r.csv"
    log.write_text("timestamp,model,value,output_tokens\n" + "".join(f"{time(i)},m,{i % 50},20\n" for i in range(ROWS))
                   + f"{word},m,7,20\n")
    assert read_rows(str(log))["timestamp"].iloc[-1] == word   # text, not a bool: typed with the whole column
    code = main(["forecast", "backtest", "--trace", str(log), "--format", fmt, "--models", "persistence"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().splitlines()[-1] == (f"gputide: error: {log}: field 'timestamp': invalid value '{word}'; "
                                            f"allowed: {ISO_OR_EPOCH} (row {ROWS + 2})"), err
