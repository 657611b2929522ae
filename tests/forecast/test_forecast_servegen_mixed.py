"""An evenly spaced ServeGen client keeps its own window among clients of a shorter one.

2ff2d24 gave every client whose starts lie on the folder's grid the folder's window (the most common spacing over
all clients), so a complete hourly client among 10-minute clients got a 600 s window: 50 of its 60 minutes were
missing, and since a time any client lacks is missing for the sum, 120 of the folder's 144 cells were NaN, silently
(the folder loaded with no NaN before). Only a client whose spacings differ, one missing some of its windows, takes
the folder's window now; an evenly spaced client's window is its spacing."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand


def _client(folder: Path, name: str, rows: dict[float, float]) -> None:
    (folder / f"{name}.csv").write_text("".join(f"{s:g},{r:g},1,,0,0\n" for s, r in rows.items()))


def test_a_complete_hourly_client_among_ten_minute_clients_is_summed_not_blanked(tmp_path):
    for i in range(2):
        _client(tmp_path, f"ten-{i}", {t: 1 for t in range(0, 86400, 600)})
    _client(tmp_path, "hourly", {t: 10 for t in range(0, 86400, 3600)})
    y = load_demand(tmp_path, "servegen")
    assert y.index.freq == "600s" and len(y) == 144
    assert not y.isna().any()
    assert np.array_equal(y.to_numpy(), np.full(144, 12.0))


def test_a_sparse_hourly_client_among_ten_minute_clients_keeps_its_recurring_spacing(tmp_path):
    # an hourly client missing some hours: its starts lie on the folder's 600 s grid, but it is not evenly spaced
    kept = [h for h in range(24) if h not in (3, 4, 9, 15)]
    _client(tmp_path, "ten", {t: 1 for t in range(0, 86400, 600)})
    _client(tmp_path, "hourly", {3600 * h: 10 for h in kept})
    y = load_demand(tmp_path, "servegen")
    missing = {h for h in range(24) if h not in kept}
    assert [None if np.isnan(v) else v for v in y] == [None if i // 6 in missing else 11.0 for i in range(144)]


def test_a_client_with_exactly_every_other_window_is_read_as_a_client_of_a_window_twice_as_long(tmp_path):
    # its file cannot tell it from a client of 1200 s windows: evenly spaced, so its spacing is its window
    _client(tmp_path, "full", {600 * i: 1 for i in range(20)})
    _client(tmp_path, "halves", {1200 * i: 10 for i in range(10)})
    y = load_demand(tmp_path, "servegen")
    assert y.index.freq == "600s" and len(y) == 20
    assert list(y) == [11.0] * 20


def test_two_starts_closer_than_the_tolerance_are_still_an_input_error_not_a_zero_window(tmp_path):
    (tmp_path / "a.csv").write_text("0,1\n0.0000001,1\n")
    _client(tmp_path, "b", {t: 1 for t in range(0, 3600, 600)})
    with pytest.raises(InputError):
        load_demand(tmp_path, "servegen")
