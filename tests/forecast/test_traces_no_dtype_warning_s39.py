"""A large CSV whose column mixes numbers and text across pandas' read blocks loads (or is refused) without pandas'
DtypeWarning on stderr (session 39, item 1).

pandas' C parser reads a file in blocks of rows (2**20 // columns rounded down to a power of two: 262,144 rows of a
2- or 3-column file) and guesses each block's types on its own; a column numeric in one block and text in another
came back mixed, with a `DtypeWarning: Columns (1) have mixed types. Specify dtype option on import or set
low_memory=False.` printed to stderr beside gputide's own error, or beside a run that went through (a requests log
whose model column holds ids in one block and names in another). Now the whole file is typed at once.
"""

from __future__ import annotations

import warnings

import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand, read_rows

BLOCK = 262_144   # pandas' block of rows for a 2- or 3-column file: the row after it starts a block of its own
START = 1704067200   # 2024-01-01T00:00:00Z


def test_a_bad_value_past_the_first_block_is_refused_naming_it_with_no_warning(tmp_path, capsys):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{START + 60 * i},{i % 50}\n" for i in range(BLOCK))
                     + f"{START + 60 * BLOCK},abc\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(InputError) as info:
            load_demand(trace)
    assert [str(w.message) for w in caught] == []
    assert str(info.value) == (f"{trace}: field 'value': invalid value 'abc'; allowed: a number from 0 to 1e+09 "
                               f"(req/s; empty: not observed) (row {BLOCK + 2})")
    code = main(["forecast", "backtest", "--trace", str(trace), "--models", "persistence"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert "DtypeWarning" not in err and "mixed types" not in err, err
    assert err.strip().splitlines() == [f"gputide: error: {info.value}"], err


def test_a_requests_log_whose_label_column_turns_from_numbers_to_text_loads_with_no_warning(tmp_path):
    log = tmp_path / "r.csv"
    log.write_text("timestamp,model\n" + "".join(f"{START + i * 0.25:.2f},7\n" for i in range(BLOCK))
                   + "".join(f"{START + (BLOCK + i) * 0.25:.2f},llama\n" for i in range(10)))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        rows = read_rows(str(log))
        y = load_demand(log, "requests")
    assert [str(w.message) for w in caught] == []
    assert rows["model"].iloc[0] == "7" and rows["model"].iloc[-1] == "llama"
    assert y.iloc[1:-1].eq(4.0).all() and len(y) > 1000
