"""A ServeGen client missing most of its windows keeps its window.

A client's window was its most common spacing: a client missing more than half its windows has two windows as its
most common spacing, so its file was refused (a start 'off the grid' of the double window). The window is now,
for a client whose starts lie on the folder's grid, the longest its spacings share (one folder window once any two
of its windows are neighbours), else the spacing its recurring spacings share; a file whose starts fit no one grid
is still refused, naming the file, row, value and window."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand

M_SMALL = Path(__file__).resolve().parents[2] / "balancer" / "data" / "servegen-language" / "m-small"


def _client(folder: Path, name: str, rows: dict[float, float]) -> Path:
    folder.mkdir(exist_ok=True)
    path = folder / f"{name}.csv"
    path.write_text("".join(f"{s:g},{r:g},1,,0,0\n" for s, r in rows.items()))
    return path


def _values(y) -> list:
    return [None if np.isnan(v) else v for v in y]


SPARSE = [0, 2, 4, 6, 7, 10, 12, 14, 16, 20]   # 10 of 21 windows: the most common spacing is two windows


# A client with exactly every other window is indistinguishable from one of windows twice as long, and is read so
# (tests/forecast/test_forecast_servegen_mixed.py): an hourly client among 10-minute ones must keep its hour.
@pytest.mark.parametrize("kept", [SPARSE], ids=["more than half missing"])
def test_a_client_missing_most_windows_beside_full_ones_is_missing_there_not_refused_or_stretched(tmp_path, kept):
    _client(tmp_path, "full", {600 * i: 1 for i in range(21)})
    _client(tmp_path, "sparse", {600 * i: 10 for i in kept})
    y = load_demand(tmp_path, "servegen")
    assert y.index.freq == "600s" and len(y) == 21
    assert _values(y) == [11.0 if i in kept else None for i in range(21)]


def test_a_sparse_client_alone_takes_the_spacing_its_recurring_spacings_share(tmp_path):
    kept = [0, 1, 3, 5, 8, 10, 12, 15, 17, 19]   # spacings 600 once, 1200 five times, 1800 three times
    _client(tmp_path, "only", {600 * i: 2 for i in kept})
    y = load_demand(tmp_path, "servegen")
    assert y.index.freq == "600s"
    assert _values(y) == [2.0 if i in kept else None for i in range(20)]


def test_a_real_folder_with_a_client_thinned_keeps_every_other_value(tmp_path):
    folder = tmp_path / "m-small"
    shutil.copytree(M_SMALL, folder)
    whole = load_demand(M_SMALL, "servegen")
    thinned = folder / "chunk-0-trace.csv"
    lines = thinned.read_text().splitlines(keepends=True)
    kept = sorted(set(range(0, len(lines), 3)) | set(range(1, len(lines), 7)))   # 1/3 + 1/7 of its windows
    thinned.write_text("".join(lines[i] for i in kept))
    y = load_demand(folder, "servegen")
    assert y.index.equals(whole.index)
    assert y.iloc[kept].equals(whole.iloc[kept])
    assert y.drop(y.index[kept]).isna().all()


def test_starts_that_fit_no_grid_are_still_refused_naming_file_row_value_and_window(tmp_path, capsys):
    _client(tmp_path, "full", {600 * i: 1 for i in range(21)})
    bad = _client(tmp_path, "odd", {s: 1 for s in (0, 600, 1200, 2100, 2700, 3600, 4200, 5100)})   # 600 and 900
    with pytest.raises(InputError, match=r"field 'window_start_s': invalid value 2100;.*\(600 s.*\(row 4\)"):
        load_demand(tmp_path, "servegen")
    code = main(["forecast", "backtest", "--trace", str(tmp_path), "--format", "servegen", "--models",
                 "persistence", "--horizons", "1h", "--min-train-days", "0.01", "--stride", "5"])
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    assert err.startswith(f"gputide: error: {bad}: field 'window_start_s': invalid value 2100; allowed: starts a "
                          "multiple of the client's window (600 s"), err
