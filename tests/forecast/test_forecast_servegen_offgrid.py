"""A ServeGen start off its client's window grid is refused naming the file, the row and the value.

A client's window was its shortest spacing between starts: one extra row `5,6` in a file of 600 s windows made
every window 5 s long, 241,801 steps for a two-week trace, and the backtest hung. The window is now the most common
spacing; a start that is not a multiple of it from the others is an InputError (exit 2)."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.grid import off_grid
from balancer.forecast.servegen import own_window
from balancer.forecast.traces import load_demand


def _rows(starts) -> str:
    return "".join(f"{s},{1 + i % 3},1,,0,0\n" for i, s in enumerate(starts))


def test_one_stray_start_exits_2_naming_its_file_row_and_value(tmp_path, capsys):
    client = tmp_path / "a.csv"
    client.write_text(_rows(range(0, 600 * 300, 600)) + "5,6,1,,0,0\n")
    code = main(["forecast", "backtest", "--trace", str(tmp_path), "--format", "servegen", "--models",
                 "persistence", "--horizons", "1h", "--min-train-days", "0.5", "--stride", "50"])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and "Traceback" not in err, err
    assert lines[0].startswith(f"gputide: error: {client}: field 'window_start_s': invalid value 5;"), lines
    assert "(row 301)" in lines[0] and "600 s" in lines[0], lines


def test_a_stray_first_start_is_the_one_blamed(tmp_path):
    (tmp_path / "a.csv").write_text(_rows([5] + list(range(600, 600 * 50, 600))))
    with pytest.raises(InputError, match=r"field 'window_start_s': invalid value 5;.*\(row 1\)"):
        load_demand(tmp_path, "servegen")


def test_missing_windows_keep_the_window():
    starts = np.array([0, 600, 1800, 2400, 4200], float)
    assert own_window(np.diff(starts))[0] == 600.0 and off_grid(starts, 600.0).size == 0
    assert own_window(np.diff(np.array([0, 5, 600, 1200, 1800], float)))[0] == 600.0
