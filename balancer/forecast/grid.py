"""Several clients' windowed rates summed on one time grid: the arithmetic of the ServeGen loader (pure).

A client reports its rate per window: window j covers [start_j, start_j + w) with w the client's window, which
the caller gives (`balancer.forecast.servegen.client_windows` chooses it for a ServeGen folder), cut at the next
start if they come closer. Between windows the client is unobserved. Its starts lie on one grid, a multiple of w
apart (`off_grid` finds those that do not: the loader refuses them). Demand at a time is the sum over clients of
the rate each has then, so on a grid of cells [T, T + g) (`sum_on_grid`):

* a client's value in a cell is its time-weighted mean rate over the cell when its windows cover all of it, and
  missing (NaN) when they leave any part uncovered (a window absent from its file, or before its first / after its
  last window);
* the cell's demand is the sum of the clients' values, missing when any client's is: a missing window is not zero
  demand, and averaging whoever did report would mix clients instead of adding them.

The grid's step g is the shortest client window and it starts at the earliest window, so clients whose windows are
aligned (ServeGen's own files) are summed window by window, exactly; clients at other offsets are spread over the
cells their windows overlap.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

TOLERANCE_S = 1e-6  # starts closer than this to a grid line are on it (float sums of windows)


def off_grid(starts: np.ndarray, window: float) -> np.ndarray:
    """Indices of the (sorted) starts that are not a multiple of `window` away from the phase most starts share."""
    starts = np.asarray(starts, float)
    phase = np.mod(starts - starts[0], window)
    phase = np.where(window - phase <= TOLERANCE_S, 0.0, phase)   # just under a whole window: on the line
    values, counts = np.unique(np.round(phase / TOLERANCE_S) * TOLERANCE_S, return_counts=True)
    common = values[np.argmax(counts)]
    distance = np.abs(phase - common)
    return np.flatnonzero(np.minimum(distance, window - distance) > TOLERANCE_S)


def cell_means(starts: np.ndarray, rates: np.ndarray, window: float, first: float, step: float,
               cells: int) -> np.ndarray:
    """Time-weighted mean rate of one client over each cell [first + i step, first + (i+1) step); NaN where its
    windows leave part of the cell uncovered."""
    starts, rates = np.asarray(starts, float), np.asarray(rates, float)
    ends = np.minimum(starts + window, np.append(starts[1:], np.inf))
    lo = np.floor((starts - first) / step).astype(np.int64)
    hi = np.maximum(np.ceil((ends - first) / step).astype(np.int64), lo + 1)
    count = hi - lo   # cells each window touches
    win = np.repeat(np.arange(len(starts)), count)
    cell = np.repeat(lo - np.cumsum(count) + count, count) + np.arange(count.sum())
    left = first + cell * step
    share = (np.minimum(ends[win], left + step) - np.maximum(starts[win], left)) / step   # of the cell covered
    keep = (share > 0) & (cell >= 0) & (cell < cells)
    mean, covered = np.zeros(cells), np.zeros(cells)
    np.add.at(mean, cell[keep], rates[win[keep]] * share[keep])
    np.add.at(covered, cell[keep], share[keep])
    return np.where(covered >= 1.0 - 1e-9, mean, np.nan)


def grid_of(clients: list[tuple[np.ndarray, np.ndarray]], windows: list[float]) -> tuple[float, float, int]:
    """(first cell's start, step, number of cells): cells of the shortest window from the earliest window on."""
    step = min(windows)
    first = min(float(s[0]) for s, _ in clients)
    last = max(float(s[-1]) + w for (s, _), w in zip(clients, windows))
    return first, step, max(int(np.ceil((last - first) / step - 1e-9)), 1)


class TooManyCells(ValueError):
    """The grid would hold more cells than allowed (windows of seconds over decades); the message says how many."""


def sum_on_grid(clients: list[tuple[np.ndarray, np.ndarray]], windows: list[float],
                max_cells: int | None = None) -> tuple[float, float, np.ndarray]:
    """Clients given as (sorted distinct starts, rates), with one window each, -> (first cell's start, step,
    summed demand per cell); TooManyCells when the grid would hold more than `max_cells` cells."""
    first, step, cells = grid_of(clients, windows)
    if max_cells is not None and cells > max_cells:
        raise TooManyCells(f"{cells} windows of {step:g}s")
    each = np.vstack([cell_means(s, r, w, first, step, cells) for (s, r), w in zip(clients, windows)])
    # pandas' grouped sum is compensated (Kahan): aligned ServeGen files give the very sums their windows add to
    total = pd.Series(each.ravel(), index=np.tile(np.arange(cells), len(clients))).groupby(level=0).sum()
    return first, step, np.where(np.isnan(each).any(axis=0), np.nan, total.to_numpy(float))
