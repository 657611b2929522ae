"""How rows from several places become one demand series.

ServeGen: clients are summed on a common time grid. Clients whose windows start at different offsets were each put
on the union of their start times, so every grid step held one client: demand alternated between the clients
(1, 10, 1, 10 instead of 11) and any coarser step averaged them (5.5); a client's missing window counted as zero.

csv: rows in any order are put in time order; a time given twice is an error naming both rows (never summed)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import SERVEGEN_EPOCH, load_demand


def _client(folder: Path, name: str, rows: dict[int, float]) -> None:
    folder.mkdir(exist_ok=True)
    (folder / f"{name}.csv").write_text("".join(f"{s},{r},1,,0,0\n" for s, r in rows.items()))


def _values(y: pd.Series) -> list:
    return [None if np.isnan(v) else v for v in y]


def test_servegen_clients_at_different_offsets_are_summed_not_averaged(tmp_path):
    _client(tmp_path, "a", {600 * i: 1.0 for i in range(4)})         # windows at 0, 600, 1200, 1800
    _client(tmp_path, "b", {300 + 600 * i: 10.0 for i in range(4)})  # windows at 300, 900, 1500, 2100
    y = load_demand(tmp_path, "servegen")
    assert y.index[0] == SERVEGEN_EPOCH and pd.Timedelta(y.index.freq) == pd.Timedelta("10min")
    # the edges are half covered by one client: unknown, not its half
    assert _values(y) == [None, 11.0, 11.0, 11.0, None]
    assert _values(load_demand(tmp_path, "servegen", step="20min")) == [11.0, 11.0, None]


def test_a_clients_missing_window_is_missing_not_zero(tmp_path):
    _client(tmp_path, "a", {0: 1.0, 600: 1.0, 1800: 1.0})   # no window at 1200
    _client(tmp_path, "b", {0: 10.0, 600: 10.0, 1200: 10.0, 1800: 10.0})
    assert _values(load_demand(tmp_path, "servegen")) == [11.0, 11.0, None, 11.0]


def test_aligned_servegen_clients_are_summed_window_by_window(tmp_path):
    _client(tmp_path, "a", {1200: 2.0, 0: 1.5, 600: 0.5})   # rows in any order
    _client(tmp_path, "b", {0: 0.25, 600: 1.0, 1200: 3.0})
    assert _values(load_demand(tmp_path, "servegen")) == [1.75, 1.5, 5.0]


def test_a_servegen_window_given_twice_names_its_rows(tmp_path):
    (tmp_path / "c.csv").write_text("0,1,1,,0,0\n600,2,1,,0,0\n600,3,1,,0,0\n")
    with pytest.raises(InputError, match=r"field 'window_start_s'.*each window once.*row 3 repeats row 2"):
        load_demand(tmp_path, "servegen")


def test_csv_rows_in_any_order_keep_their_values(tmp_path):
    path = tmp_path / "d.csv"
    path.write_text("timestamp,value\n1200,3\n0,1\n600,2\n")
    assert list(load_demand(path, "csv")) == [1.0, 2.0, 3.0]


def test_a_csv_time_given_twice_exits_2_naming_both_rows_and_the_remedy(tmp_path, capsys):
    path = tmp_path / "d.csv"
    path.write_text("timestamp,value\n2024-01-01T00:00:00Z,1\n2024-01-01T00:10:00Z,2\n"
                    "2024-01-01T01:00:00+01:00,3\n")   # the first row's instant, written in another zone
    rc = main(["forecast", "backtest", "--trace", str(path)])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert rc == 2
    assert err.startswith(f"gputide: error: {path}: field 'timestamp': invalid value '2024-01-01T01:00:00+01:00'")
    assert "row 4 repeats 2024-01-01T00:00:00+00:00 of row 2" in err, err
    assert "each time once" in err and "sum(" in err, err
