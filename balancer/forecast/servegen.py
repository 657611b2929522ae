"""ServeGen clients and their windows: what the ServeGen loader (`traces.load_demand(..., "servegen")`) knows of
each client file before `grid.sum_on_grid` adds the clients up (pure: no file is read here).

A ServeGen folder holds one headerless file per client, a row per window: ``window_start_s, rate_req_per_s, ...``.
`client_of` puts a client's rows in time order, keeping the row each start came from so that an error names it; a
window given twice in one file is an InputError.

A client's window (`client_windows`), when its starts all lie on the folder's grid (the most common spacing of all
its clients' starts), is the longest window that grid and its starts share: the greatest common divisor of its
spacings, in folder windows. A client missing some or most of its windows still has two neighbours one folder
window apart and keeps the folder's window, so its missing windows are missing rather than stretched over their
neighbours; an evenly spaced client keeps its spacing (an hourly client among 10-minute ones, complete or missing
some hours). A client missing exactly every other window (any client whose spacings are all multiples of a
longer window) is read as a client of that longer window: its file cannot tell the two apart. A client whose
starts are off the folder's grid takes its own window (`own_window`): the spacing its recurring spacings share,
when that is itself one of its spacings, else its most common spacing. A start off the client's grid is an
InputError naming the file, the row, the value and the window: with the shortest spacing as the window, one mistyped
start 5 s after another made every window 5 s long. A client of a single window takes the median of the others'
windows (600 s when no client has more than one).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from balancer.errors import InputError
from balancer.forecast.grid import TOLERANCE_S, off_grid

DEFAULT_WINDOW_S = 600.0   # a folder whose clients each report one window: ServeGen's usual window


class Client(NamedTuple):
    """One client file as read: its starts and rates in time order, and the row (0-based) each came from."""

    file: Path
    rows: pd.DataFrame   # the file's columns as read, for the cell an error quotes
    starts: np.ndarray
    rates: np.ndarray
    order: np.ndarray


def client_of(file: Path, rows: pd.DataFrame, starts: pd.Series, rates: pd.Series) -> Client:
    """One ServeGen client's starts and rates in time order (and the row of each); a window given twice is an
    InputError naming its row."""
    start, rate = starts.to_numpy(float), rates.to_numpy(float)
    order = np.argsort(start, kind="stable")
    again = np.flatnonzero(np.diff(start[order]) == 0)
    if again.size:
        row = int(order[again[0] + 1])
        raise InputError(str(file), "window_start_s", cell_value(rows, 0, row), "each window once per client file",
                         detail=f"row {row + 1} repeats row {int(order[again[0]]) + 1}")
    return Client(file, rows, start[order], rate[order], order)


def _spacings(gaps: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The distinct spacings (in units of `TOLERANCE_S`: float sums of windows are one spacing) and their counts."""
    return np.unique(np.round(gaps / TOLERANCE_S).astype(np.int64), return_counts=True)


def _most_common(values: np.ndarray, counts: np.ndarray) -> float:
    return float(values[np.argmax(counts)]) * TOLERANCE_S   # argmax: the first, shortest, of the most common


def own_window(gaps: np.ndarray) -> tuple[float, str]:
    """A client's window from its own spacings, and how it was found: the greatest common divisor of the spacings
    that recur, when it is itself a spacing of the file (a client missing most windows still has some neighbours
    one window apart, and its longer gaps are multiples of it), else its most common spacing. Spacings seen once
    are left out of the divisor: one stray start (5 s after another) would make every window 5 s long."""
    values, counts = _spacings(gaps)
    recurring = values[counts > 1]
    if recurring.size and (shared := int(np.gcd.reduce(recurring))) in values:
        return float(shared) * TOLERANCE_S, "the spacing its recurring spacings share"
    return _most_common(values, counts), "its most common spacing"


def _shared_window(gaps: np.ndarray, folder: float) -> float:
    """The longest window a client's spacings share, given they are all multiples of the folder's window: counted in
    folder windows, so float sums of windows do not shrink it to the tolerance; two starts closer than the
    tolerance are 0 windows apart, which leaves the divisor as it is (one folder window when that is all there is)."""
    return float(max(int(np.gcd.reduce(np.round(gaps / folder).astype(np.int64))), 1)) * folder


def client_windows(clients: list[Client]) -> list[float]:
    """Each client's window (the module docstring): when every start of the client lies on the folder's grid, the
    longest window its spacings share (`_shared_window`), else its own (`own_window`); a start off that grid is an
    InputError naming its file, row and value."""
    gaps = [np.diff(c.starts) for c in clients]
    pooled = np.concatenate(gaps)
    folder = _most_common(*_spacings(pooled)) if pooled.size else None
    windows: list[float | None] = []
    for c, gap in zip(clients, gaps):
        if not gap.size:
            windows.append(None)
        elif folder and not off_grid(c.starts, folder).size:
            windows.append(_shared_window(gap, folder))
        else:
            window, how = own_window(gap)
            off = off_grid(c.starts, window)
            if off.size:   # one stray start made every window as short as its distance to a neighbour
                row = int(c.order[off].min())
                raise InputError(str(c.file), "window_start_s", cell_value(c.rows, 0, row),
                                 f"starts a multiple of the client's window ({window:g} s, {how}) apart",
                                 detail=f"row {row + 1}")
            windows.append(window)
    known = [w for w in windows if w is not None]
    fallback = float(np.median(known)) if known else DEFAULT_WINDOW_S
    return [fallback if w is None else w for w in windows]


def cell(column: pd.Series, row: int) -> object:
    """A cell as read, a numpy scalar as its Python value: a message shows -1, not np.int64(-1)."""
    value = column.iloc[row]
    return value.item() if isinstance(value, np.generic) else value


def cell_value(rows: pd.DataFrame, column: int, row: int) -> object:
    """`cell` of `rows`' `column`."""
    return cell(rows[column], row)
