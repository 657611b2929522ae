"""Demand traces: load any supported file into one regular series, then clean it for fitting.

`load_demand(path, fmt, step)` returns a pandas Series of demand in requests per second on a tz-aware UTC
DatetimeIndex at a regular step, with NaN where nothing was observed. Three formats:

* ``csv``: a header ``timestamp,value``; timestamps ISO-8601 (naive ones are taken as UTC) or epoch seconds;
  ``value`` is demand per second (empty: not observed). Resampled to ``step`` by averaging the observed rows;
  without one, the trace's own step is the median gap between its times, rounded to whole microseconds as a
  ``--step`` is (`parse_step`) and at least 1s (`own_step`: shorter, an InputError naming the gap).
  Rows may come in any order (exports of several periods pasted together): they are put in time order. Each
  time may appear once, as in a Prometheus series (Prometheus itself refuses a second sample at one timestamp):
  a repeated time, the same instant written twice in any form (``...T01:00+01:00`` and ``...T00:00Z``), is an
  InputError naming the row, the time and the row that first gave it (exit 2). It is not summed: it is most often
  one series exported twice (an HA Prometheus pair, a file appended twice), where a sum would double the demand,
  or several series exported without ``sum(...)``, which is the query to export instead.
* ``servegen``: a folder of headerless ServeGen client files
  (``window_start_s, rate_req_per_s, cv, dist, p1, p2``), one client per file, summed on a common time grid
  (`grid`): demand at a time is the sum of every client's rate then; a client without a window covering a time
  (a row missing from its file, or windows at an offset leaving the trace's edges half covered) makes that time
  missing (NaN), neither zero nor the mean of the clients that did report. A window given twice in one file is an
  InputError. A client whose starts lie on the folder's grid (the most common spacing of all its clients' starts)
  takes the longest window its spacings share, else its own (`servegen`); a start off the client's grid is an InputError
  naming the file, the row, the value and the window. ServeGen's ``window_start_s`` counts seconds from an arbitrary
  origin; it is mapped onto ``SERVEGEN_EPOCH`` (Monday 2024-01-01 00:00 UTC) unless ``origin`` overrides it. A coarser
  ``step`` averages the observed windows, as for csv; without one, the window is the step (held as csv's own step).
* ``requests``: one row per request with a ``timestamp`` column (any case), in any order, several at one time
  allowed; counted per step, divided by the step. The log is taken to cover the time from its first request to its
  last: a step it covers only in part, the last and the first unless the first request falls at its start, is not
  observed (NaN, as a gap), where its count read as demand undercounted it (630 s of 1 req/s was [1.00, 0.05] at
  a 10-minute step). A file whose ``value`` column is all numbers, with the same number k of rows at each distinct
  time and the distinct times evenly spaced (at any spacing), is one or k series sampled together read with the
  wrong format (its ``value`` would be ignored): an InputError suggesting ``--format csv`` (for k > 1, one series
  such as ``sum(...)``). A log whose ``value`` is per-request data is read once ``value`` is renamed or dropped
  (`_not_a_demand_trace`).

Cleaning rules (used for fitting and scoring, never to change what `load_demand` returns):

* **Outages** (`mask_outages`): a run of exact zeros of at most ``max_run`` steps (default 6 h) lying in a busy
  stretch, i.e. at least 75% of the observed values in the centred one-day window around it are non-zero, is an
  outage of the collector or the service, not demand. It becomes NaN. Zeros in a mostly idle series, and zero
  spells longer than ``max_run``, are kept as real demand.
* **Bursts** (`clip_bursts`): fitting targets are clipped at ``factor`` times the trailing one-day 99th
  percentile, so one burst does not bend a seasonal profile. Scores are always computed on the unclipped truth.
"""

from __future__ import annotations

import csv
import math
import os
import re
import sys
import warnings
from decimal import ROUND_HALF_EVEN, Decimal
from pathlib import Path

import numpy as np
import pandas as pd

from balancer.errors import InputError
from balancer.forecast.grid import TooManyCells, sum_on_grid
from balancer.forecast.servegen import cell, cell_value, client_of, client_windows

SERVEGEN_EPOCH = pd.Timestamp("2024-01-01T00:00:00Z")  # a Monday
FORMATS = ("csv", "servegen", "requests")
DAY_S = 86400.0


_SECONDS = re.compile(r"\s*[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?\s*")   # a bare number: seconds
# the words pandas reads for each unit, in seconds (M, a month to pandas, is none): read here, never by pandas
_UNIT_S = {**dict.fromkeys(("w", "week", "weeks"), Decimal(604800)),
           **dict.fromkeys(("d", "day", "days"), Decimal(86400)),
           **dict.fromkeys(("h", "hr", "hour", "hours"), Decimal(3600)),
           **dict.fromkeys(("m", "min", "mins", "minute", "minutes"), Decimal(60)),
           **dict.fromkeys(("s", "sec", "secs", "second", "seconds"), Decimal(1)),
           "ms": Decimal("1e-3"), "us": Decimal("1e-6"), "ns": Decimal("1e-9")}
_PART = r"(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]+)\s*"
_DURATION = re.compile(rf"\s*([+-]?)\s*(?:{_PART})+")


def _duration_s(text: str) -> Decimal | None:
    """Seconds from '10min', '1h', '1.5h', '1d12h' or '2 days': numbers each with a unit, largest first, no unit
    twice; None for anything else. pandas.Timedelta read '1,5h' as 15 h, '1.5.5h' as 2 h and '10min20min' as
    30 min, each a --step or horizon the writer did not mean. Decimal, not float: 4.1 x 60 s in floats is
    245.99999999999997 s, a Timedelta of 245999999999 ns that pandas' resampling refused (a traceback)."""
    whole = _DURATION.fullmatch(text)
    if whole is None:
        return None
    total, last = Decimal(0), Decimal("Infinity")
    for number, unit in re.findall(_PART, text[whole.end(1):]):
        size = _UNIT_S.get(unit if unit == "M" else unit.lower())
        if size is None or size >= last:
            return None
        total, last = total + Decimal(number) * size, size
    return -total if whole.group(1) == "-" else total


_TOO_LONG_S = Decimal("1e11")
# the finest step a trace is read at (a --step, a trace's own step): finer, demand per second is read off
# fractions of a second
MIN_STEP = pd.Timedelta(seconds=1)


def _whole_us(seconds: Decimal) -> pd.Timedelta:
    """`seconds` rounded to whole microseconds: trace times are held in microseconds (or seconds, both whole ones),
    and pandas refuses to resample them at a step finer than their unit."""
    # about 3,170 years (pandas' own overflow, caught by the caller, stops at 292); 1e999999999 s made a
    # billion-digit int first
    if not abs(seconds) < _TOO_LONG_S:
        raise OverflowError(f"{seconds} s")
    return pd.Timedelta(int((seconds * 1_000_000).to_integral_value(ROUND_HALF_EVEN)), unit="us")


def parse_step(step: str | float | pd.Timedelta, *, file: str | None = None, field: str = "step") -> pd.Timedelta:
    """'10min', '1h', '600s', '1d12h' or seconds (a number, or a string holding a bare number such as '3600': pandas
    alone reads that as nanoseconds) -> a positive Timedelta of whole microseconds; InputError otherwise."""
    allowed = "a duration such as 10min, 1h, 1d12h, 600s or a number of seconds"
    try:
        if isinstance(step, str):
            seconds = Decimal(step) if _SECONDS.fullmatch(step) else _duration_s(step)
            if seconds is None:
                raise InputError(file, field, step, allowed)
            td = _whole_us(seconds)
        elif isinstance(step, int | float):
            td = _whole_us(Decimal(repr(float(step)))) if math.isfinite(step) else pd.NaT
        else:
            td = pd.Timedelta(step)
            td = td if pd.isna(td) else td.round("us")
    except (ValueError, TypeError, ArithmeticError) as exc:   # OverflowError (beyond 292 years), decimal.Overflow
        raise InputError(file, field, step, allowed) from exc
    if pd.isna(td) or td < MIN_STEP:
        raise InputError(file, field, step, "a duration of at least 1s, such as 10min")
    return td


MAX_EPOCH_S = 4102444800.0  # 2100-01-01: later (or negative) epoch seconds are not demand history
_FIRST, _LAST = pd.Timestamp(0, unit="s", tz="UTC"), pd.Timestamp(MAX_EPOCH_S, unit="s", tz="UTC")
ROW_SHOWN = 200  # characters of a refused row a message shows
MAX_RPS = 1e9  # demand beyond this is a wrong column or unit, and sums of such values overflow to inf
MAX_STEPS = 5_000_000  # a trace resampled to more steps than this is a wrong --step, not a long history
_READ_ERRORS = (OSError, pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError, ValueError)


def booleans(column: pd.Series) -> pd.Series:
    """Cells pandas read as True/False (`true`, `FALSE`): to_numeric takes them for 1 and 0, where no number was
    written; a demand or a GPU count of `true` is a mistake to name, not a 1. Only a bool or object column can hold
    them: a numeric one is answered without looking at its cells."""
    if column.dtype == bool:
        return pd.Series(True, index=column.index)
    if column.dtype != object:
        return pd.Series(False, index=column.index)
    return column.map(lambda v: isinstance(v, (bool, np.bool_))).astype(bool)


def _one_line(exc: BaseException) -> str:
    return " ".join(str(exc).split())[:200]


ISO_OR_EPOCH = "ISO-8601 (e.g. 2024-01-01T00:00:00Z) or epoch seconds"
# a zone written as a word or a lower-case z (2024-01-01 00:00:00 UTC, as BigQuery exports it): ISO-8601's Z
_ZONE_WORD = re.compile(r"(?<=\d)\s*(?:UTC|GMT|z)\s*$")


# RFC 3339's lower-case t between date and time (2024-01-01t00:00:00z), and ISO-8601's comma before a fraction of
# a second (2024-01-01 00:00:00,123, Python logging's default): both valid, both refused by pandas' ISO8601 format
_CLOCK_WORDS = ("now", "today")   # what pandas' ISO-8601 reads as the wall clock, not a time written
_LOWER_T = re.compile(r"(?<=\d)t(?=\d)")
_COMMA_FRACTION = re.compile(r"(?<=\d:\d\d:\d\d),(?=\d)")


def _iso(value: object) -> object:
    """A cell as pandas' ISO-8601 parse is given it (RFC 3339's and logging's forms written as ISO-8601's). A blank
    cell (only whitespace) is None, an empty cell (NaT), as `_only_numbers` takes it: parsed as text, it was a bad
    time, named before the cell that was one (`1704067200, ' ', abc` blamed row 3, not `abc` on row 4), and refused
    without the '(a time on every row)' an empty cell is refused with (audit a6)."""
    if not isinstance(value, str):
        return value
    if _blank(value):
        return None
    return _COMMA_FRACTION.sub(".", _LOWER_T.sub("T", _ZONE_WORD.sub("Z", value), count=1), count=1)


def to_utc(raw: pd.Series, path: str, column: str) -> pd.DatetimeIndex:
    """A timestamp column (ISO-8601 or epoch seconds) as UTC times; a bad cell is an InputError naming its row.

    ISO-8601 only, never pandas' guess at a format: `format="mixed"` read a day-first 01/02/2024 as 2 January and
    13/01/2024 as 13 January in one file, a trace silently reordered (exit 0). A True/False cell is refused as any
    bad time is: pandas reads a column of only True/False as booleans, which to_numeric took for 1 and 0 (and, before
    `read_rows` typed a file at once, so read a block of 131,072 such rows beside the text or numbers of the rest:
    among ISO times the column was said to mix the two forms, among epoch seconds `False` was 1970; audit s38). So
    is a `now` or `today` cell: pandas' ISO-8601 reads them as the wall clock, a sample stamped with the hour the
    file was loaded (exit 0; review r5)."""
    flags = booleans(raw) | raw.isin(_CLOCK_WORDS)
    if flags.any():   # True/False, which pandas reads as booleans, or the clock's words: no time at all
        row = int(np.flatnonzero(flags.to_numpy())[0])
        raise InputError(path, column, cell(raw, row), ISO_OR_EPOCH, detail=f"row {row + 2}")
    numeric = pd.to_numeric(raw, errors="coerce")
    allowed = ISO_OR_EPOCH
    # epoch seconds when every cell given is a number, an empty cell aside (NaN, refused below): asking every cell
    # to be one sent a column with an empty cell and an epoch past 64 bits (pandas then types it as objects) to
    # ISO-8601, whose refusal blamed its first, valid, time (audit a9)
    if pd.api.types.is_numeric_dtype(raw) or _only_numbers(raw, numeric):
        index = _epoch_seconds(raw, numeric, path, column)
    else:
        try:
            index = pd.DatetimeIndex(pd.to_datetime(raw.map(_iso), utc=True, format="ISO8601"))
        except (ValueError, TypeError, OverflowError) as exc:
            bad, allowed = _bad_time(raw, numeric)
            raise InputError(path, column, cell(raw, bad), allowed, detail=f"row {bad + 2}") from exc
    if index.hasnans:   # an empty cell (or NaN, NaT) reads as NaT: a sample at no time at all
        row = int(np.flatnonzero(index.isna())[0])
        raise InputError(path, column, cell(raw, row), allowed + " (a time on every row)", detail=f"row {row + 2}")
    _one_zone_kind(raw, path, column)
    # a mistyped year (0224, 2204 for 2024) parses: past 2262 it overflowed pandas' nanosecond times (a traceback),
    # within it one row stretched the trace over centuries of empty steps (a hang); epoch seconds are checked alike
    outside = (index < _FIRST) | (index > _LAST)
    if outside.any():
        row = int(np.flatnonzero(outside)[0])
        raise InputError(path, column, cell(raw, row), "ISO-8601 timestamps from 1970 to 2100", detail=f"row {row + 2}")
    return index


def _blank(value: object) -> bool:
    return isinstance(value, str) and not value.strip()


def _only_numbers(raw: pd.Series, numeric: pd.Series) -> bool:
    """Whether every cell of `raw` holding something is a number (`numeric`: `raw` coerced). An empty cell holds
    nothing whether pandas read it as NaN or as an empty string, as it does beside an integer between 2**63 and 2**64
    (a column it leaves as text): counted as given, that empty string sent the column to ISO-8601, whose refusal named
    the empty cell where the epoch past 2100 was the mistake (review s40). Cells neither NaN nor numbers are few in a
    column of epoch seconds: the first one that is not blank answers for a column of ISO-8601 times at once."""
    rest = raw[numeric.isna().to_numpy() & raw.notna().to_numpy()]
    return all(map(_blank, rest))   # stops at the first cell not blank


def _epoch_seconds(raw: pd.Series, numeric: pd.Series, path: str, column: str) -> pd.DatetimeIndex:
    """A column of numbers as epoch seconds from 1970 to 2100; an empty cell is NaT, for the caller to refuse."""
    bad = numeric.notna() & (~np.isfinite(numeric.to_numpy(float)) | (numeric < 0) | (numeric > MAX_EPOCH_S))
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(path, column, cell(raw, row), "epoch seconds between 1970 and 2100", detail=f"row {row + 2}")
    _not_basic_dates(raw, numeric, path, column)
    return pd.DatetimeIndex(pd.to_datetime(numeric, unit="s", utc=True))


def _not_basic_dates(raw: pd.Series, numeric: pd.Series, path: str, column: str) -> None:
    """A column whose every number is a date written YYYYMMDD (20240101, ISO-8601's basic format, as a spreadsheet
    or `date +%Y%m%d` writes it) is refused: read as epoch seconds it was August 1970, one day 86,400 s apart read
    as 1 s to 100 s apart, and the trace was silently squeezed into weeks of 1970 (exit 0)."""
    values = numeric.dropna()
    if values.empty or not ((values % 1 == 0) & (values >= 19000101) & (values <= 21001231)).all():
        return
    dates = pd.to_datetime(values.astype("int64").astype(str), format="%Y%m%d", errors="coerce")
    if dates.notna().all():
        row = int(np.flatnonzero(numeric.notna().to_numpy())[0])
        raise InputError(path, column, cell(raw, row), "epoch seconds or ISO-8601 with dashes (2024-01-01): "
                         "YYYYMMDD numbers read as epoch seconds fall in August 1970", detail=f"row {row + 2}")


def _bad_time(raw: pd.Series, numeric: pd.Series) -> tuple[int, str]:
    """The row of the cell a column of times failed on, and what it allows: the first cell that is neither a number
    nor ISO-8601. Naming the first that was not ISO-8601 blamed a valid time: in a column of epoch seconds with `abc`
    on row 51, the first cell (`0`) on row 2. A column whose cells are each one or the other mixes the
    two forms: the first cell of the less common one is named. One of the two is always found: the parse refused
    the column for a cell, text `_not_times` reads as no time or a number, and a number in a column `to_utc` reads
    as ISO-8601 lies beside text, so both forms have a cell (a fallback naming row 2 was never reached; session 40,
    tests/forecast/test_traces_bad_time_blames_a_cell_s40.py)."""
    is_number = numeric.notna().to_numpy()
    bad = np.flatnonzero(_not_times(raw, is_number))
    if bad.size:
        return int(bad[0]), ISO_OR_EPOCH
    times = raw.notna().to_numpy() & ~is_number & ~raw.map(_blank).to_numpy(bool)   # ISO-8601 cells, not empty
    minority = times if times.sum() < is_number.sum() else is_number
    return int(np.flatnonzero(minority)[0]), f"{ISO_OR_EPOCH}, one of them in the whole column"


def _not_times(raw: pd.Series, is_number: np.ndarray) -> np.ndarray:
    """Which cells are text that is neither a number nor an ISO-8601 time, the column parsed at once: cell by cell, a
    200,000-row ISO-8601 column with one epoch number on row 2 took 13 s to be refused. An empty cell, or a blank
    one (only whitespace, which `_iso` reads as empty), is not the one that failed (it reads as NaT), and no other
    cell is left to blame: `to_utc` refused True/False cells before, and a column `read_rows` typed at once holds
    text, numbers and empty cells only. Coerced, pandas answers a text that is no time with NaT, never an error: no
    cell is parsed one by one."""
    cells = raw.to_numpy(object)
    texts = np.fromiter((isinstance(v, str) and not _blank(v) for v in cells), bool, len(cells)) & ~is_number
    out = np.zeros(len(cells), bool)
    if texts.any():
        parsed = pd.to_datetime(pd.Series(cells[texts]).map(_iso), errors="coerce", utc=True, format="ISO8601")
        out[texts] = pd.isna(parsed)
    return out


# a time of day followed by a zone: Z, UTC, GMT or an offset such as +02:00, -0500
_ZONED = r"\d:\d\d(?::\d\d(?:[.,]\d+)?)?\s*(?:[zZ]|UTC|GMT|[+-]\d\d(?::?\d\d)?)\s*$"


def _one_zone_kind(raw: pd.Series, path: str, column: str) -> None:
    """Naive times are UTC only in a file that never names a zone: beside times that do (`...Z`, `+02:00`), a
    naive time is most likely local, and reading it as UTC shifts those rows by the writer's offset."""
    zoned = raw.astype(str).str.contains(_ZONED, regex=True).to_numpy()
    if zoned.any() and not zoned.all():
        row = int(np.flatnonzero(~zoned)[0])
        first = int(np.flatnonzero(zoned)[0])
        raise InputError(path, column, cell(raw, row), "times that all name their zone (Z or an offset such as "
                         "+02:00) or none of them (then UTC)", detail=f"row {row + 2} names none, row {first + 2} does")


def _regular(series: pd.Series, step: pd.Timedelta, how: str, path: str = "",
             own: pd.Timedelta | None = None) -> pd.Series:
    """`series` resampled at `step`. Too many steps are refused naming `step`, the step it loaded at, and the finest
    whole --step that loads it (`_least_loading`): a `TooLong` carrying the span, that least step and `own` (the
    trace's own step, where a csv or ServeGen trace has one), for a caller to name its own flag
    (`balancer.app.scenarios.load_trace_shape`: simulate's --step) or a step its own bounds ask
    (`balancer.cmd.forecast`)."""
    series = series.sort_index()
    span = series.index[-1] - series.index[0] if len(series) else pd.Timedelta(0)
    if span / step > MAX_STEPS:
        least = _least_loading(span)
        raise TooLong(path or None, "step", str(step), f"a --step of at least {least} seconds loads it (a step "
                      f"giving at most {MAX_STEPS} steps over the trace's span)",
                      detail=f"the trace spans {span.total_seconds():.0f}s", span_s=span.total_seconds(),
                      least_s=least, own_step_s=None if own is None else own.total_seconds())
    grouped = series.resample(step, origin="epoch")
    out = grouped.sum(min_count=1) if how == "sum" else grouped.mean()
    out = out.astype(float)
    out.index.freq = step
    out.name = "demand_rps"
    return out


def _least_loading(span: pd.Timedelta) -> int:
    """The finest whole-second step `_regular` resamples a trace spanning `span` at, as the too-few-steps refusal
    names a --step that plays a trace (`balancer.app.scenarios`): its refusal of one too long named only the step
    refused, nothing saying which loads it. Checked as `_regular` checks it, its float division included."""
    least = max(-(-span // pd.Timedelta(seconds=MAX_STEPS)), 1)
    while span / pd.Timedelta(seconds=least) > MAX_STEPS:
        least += 1
    return int(least)


def _read_table(path: str, allowed: str) -> tuple[pd.DataFrame, dict[str, str]]:
    """The CSV at `path` and its columns by lower-cased name; unreadable files name what is `allowed`."""
    try:
        df = read_rows(path)
    except _READ_ERRORS as exc:
        raise InputError(path, "file", path, allowed, detail=_one_line(exc)) from exc
    check_header(path, fold_case=True)
    return df, {c.strip().lower(): c for c in df.columns}


def read_rows(path: str) -> pd.DataFrame:
    """The CSV at `path` under its header's names, whatever a row's length. pandas took a field more than the header
    on every row (a trailing comma) for an index: each value was read under the next column's name, the demand as
    the time and no value at all. Here a trailing comma's empty field is dropped, and a row holding a value past
    the header, or more fields than the header and the first row (a trailing comma on some rows only: pandas
    refused it as a 'C error'), is an InputError naming its line; pandas' other errors pass on.

    The whole file is typed at once (`low_memory=False`): pandas otherwise guesses each block of rows' types on its
    own (262,144 rows of a 2-column file), and a column numeric in one block and text in another came back mixed
    with a DtypeWarning on stderr, beside gputide's error for a bad value or a run that went through."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", pd.errors.ParserWarning)   # a row longer than the header: pandas drops the rest
        try:
            return pd.read_csv(path, index_col=False, low_memory=False)
        except pd.errors.ParserWarning:
            _refuse_long_rows(path)
        except pd.errors.ParserError:
            _refuse_long_rows(path, uneven=True)
            raise
        warnings.simplefilter("ignore", pd.errors.ParserWarning)   # only empty fields past the header
        return pd.read_csv(path, index_col=False, low_memory=False)


def _refuse_long_rows(path: str, *, uneven: bool = False) -> None:
    """The first row holding a value past the header, or (`uneven`: pandas refused the file) more fields than both
    the header and the first row, as an InputError naming its line. The csv module scans without its 131072-character
    field limit (pandas has none): with it, a long name in a too-long row, or a stray quote with the rest of a large
    file behind it, was blamed on 'a field over 131072 characters' at a later row instead of on the row or the
    quote; a scan that finds nothing lets pandas' own error (the quote's) pass on."""
    limit = csv.field_size_limit()
    csv.field_size_limit(sys.maxsize)
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            reader = csv.reader(handle)
            try:
                header = next(reader, [])
                _check_widths(path, reader, header, uneven)
            except csv.Error as exc:
                if uneven:   # pandas refused the file too, and its error (a quote's) says more
                    return
                raise InputError(path, f"row {reader.line_num}", "a row the csv module cannot read",
                                 "a CSV file with a header row", detail=_one_line(exc)) from exc
    finally:
        csv.field_size_limit(limit)


def _shown(fields: list[str]) -> str:
    """A row as a message shows it: whole when short, else its start and how long it is (a 200,000-character name
    is no message)."""
    row = ",".join(fields)
    return row if len(row) <= ROW_SHOWN else f"{row[:ROW_SHOWN]}... ({len(row)} characters)"


def _check_widths(path: str, reader, header: list[str], uneven: bool) -> None:
    allowed = f"at most {len(header)} fields, one per column of the header ({','.join(header)})"
    width = None
    for fields in reader:
        if any(field.strip() for field in fields[len(header):]):
            raise InputError(path, f"row {reader.line_num}", _shown(fields), allowed)
        if not fields:   # a blank line, which pandas skips
            continue
        width = len(fields) if width is None else width
        if uneven and len(fields) > max(width, len(header)):
            raise InputError(path, f"row {reader.line_num}", _shown(fields), f"as many fields on every row, one "
                             f"per column of the header ({','.join(header)}): a trailing comma on every row or on "
                             f"none", detail=f"{len(fields)} fields, where the header has {len(header)} and the "
                             f"first row {width}")


def check_header(path: str, *, fold_case: bool = False) -> None:
    """A CSV header (of a file pandas has read) naming a column twice is an InputError: pandas renames the second
    `value` to `value.1` and reads the first, whichever the writer meant. With `fold_case`, `Timestamp` and
    `timestamp` count as one name."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as handle:
            header = next(csv.reader(handle), [])
    except csv.Error:   # a column name past the csv module's field limit: pandas read it, so do not refuse it
        return
    seen: dict[str, str] = {}
    for column in header:
        key = column.strip().lower() if fold_case else column.strip()
        if key and key in seen:
            raise InputError(path, "header", header, "each column name once", detail=f"'{seen[key]}' and '{column}'")
        seen[key] = column


def _load_csv(path: str, step: pd.Timedelta | None, coarsen_to: float | None = None) -> pd.Series:
    df, cols = _read_table(path, "a readable UTF-8 CSV with header timestamp,value")
    for need in ("timestamp", "value"):
        if need not in cols:
            raise InputError(path, "header", list(df.columns), "columns 'timestamp' and 'value'")
    if df.empty:
        raise InputError(path, "rows", 0, "at least two rows")
    values = pd.to_numeric(df[cols["value"]], errors="coerce")
    bad = (values.isna() & df[cols["value"]].notna()) | (values < 0) | ~(values <= MAX_RPS) & values.notna()
    bad |= booleans(df[cols["value"]])
    if bad.any():
        row = int(np.flatnonzero(bad.to_numpy())[0])
        raise InputError(path, "value", cell(df[cols["value"]], row), f"a number from 0 to {MAX_RPS:g} (req/s; "
                         "empty: not observed)", detail=f"row {row + 2}")
    index = to_utc(df[cols["timestamp"]], path, "timestamp")
    repeated = index.duplicated()
    if repeated.any():   # two demands at one time: averaging them would invent a third, summing double one
        row = int(np.flatnonzero(repeated)[0])
        earlier = int(np.flatnonzero(index == index[row])[0])
        raise InputError(path, "timestamp", cell(df[cols["timestamp"]], row), "each time once, rows in any order (one "
                         "series: export sum(...) rather than one series per label set, an HA pair deduplicated)",
                         detail=f"row {row + 2} repeats {index[row].isoformat()} of row {earlier + 2}")
    series = pd.Series(values.to_numpy(float), index=index)
    diffs = np.diff(np.sort(index.as_unit("ns").asi8))
    diffs = diffs[diffs > 0]
    if not diffs.size:
        if step is None:
            raise InputError(path, "timestamp", "one distinct time", "at least two distinct timestamps")
        return _regular(series, step, "mean", path)
    return _at_load_step(series, Decimal(repr(float(np.median(diffs)))) / 1_000_000_000, step, path, "timestamp",
                         "the median gap between its times", coarsen_to)


def _at_load_step(series: pd.Series, seconds: Decimal, step: pd.Timedelta | None, path: str, field: str, what: str,
                  coarsen_to: float | None) -> pd.Series:
    """`series`, a csv or ServeGen trace whose own step is `seconds` (`field`, `what`: as `own_step` names them),
    resampled at the step it loads at (`_load_step`) and keeping its own (`_own_step_of`): one path for both.

    With `coarsen_to` (a simulator's trace) one observed only as 0 is refused as having no positive demand, read off
    the rows before they are resampled: a --step told by a later refusal then refused it as this. Checked after the
    resample, it came after the too-long refusal: a decade of zeros at `simulate --step 60` was told 'a --step of
    at least 64 seconds loads it', and at --step 64 'no positive demand' (audit a3); an average of observed values
    is positive where one of them is, so the rows say what the steps would."""
    if coarsen_to is not None and series.notna().any() and not (series > 0).any():
        # refused as too few steps or too long, it was told a --step that plays it, and at that --step refused as this
        # (`balancer.app.scenarios.load_trace_shape`)
        raise InputError(path, "value", "no positive demand", "a trace with positive demand values",
                         detail="every observed value is 0")
    own = own_step(seconds, step, path, field, what, coarsen_to)
    out = _regular(series, _load_step(own, step, coarsen_to, path), "mean", path, own)
    _own_step_of(out, own, what)
    return out


def _own_step_of(out: pd.Series, own: pd.Timedelta, what: str) -> None:
    """Keeps on the loaded trace the step it loads at without --step (`what`: how it was read off the trace): a
    --step is finer than the trace only when finer than this. Its empty steps said nothing: a 1-min trace with
    every other value empty loads at 1 min, yet `--step 1min` was refused as finer than its own (120 s)."""
    out.attrs["own_step_s"] = own.total_seconds()
    out.attrs["own_step_what"] = what


class TooFewSteps(InputError):
    """`load_demand`'s refusal of a trace spanning, or observed in, under two steps. `own`: it was loaded at its own
    step (no `step`, and `coarsen_to` not finer than its own), so loading it again without one refuses it alike;
    `own_step_s`: its own step (a requests log's 1 min). Told apart from the loader's other refusals by
    `balancer.app.scenarios.load_trace_shape`, which alone names a --step for these: sending every 'rows' or 'value'
    refusal there read a trace refused for a bad value again (a 2M-row csv with `abc` on its last row: 2 loads)."""

    def __init__(self, file: str, field: str, value: object, allowed: str, detail: str = "", *, own: bool,
                 own_step_s: float) -> None:
        super().__init__(file, field, value, allowed, detail)
        self.own = own
        self.own_step_s = own_step_s


class TooLong(InputError):
    """`_regular`'s refusal of a trace spanning more than `MAX_STEPS` steps at the step it loads at: `span_s`, its
    span in seconds; `least_s`, the finest whole-second step that loads it; `own_step_s`, its own step (a csv or
    ServeGen trace's; None for a requests log, whose steps are counts at any step). Told apart by
    `balancer.cmd.forecast.run`: a backtest bounds its work more tightly than the loader, and refuses a --step finer
    than the trace's own, so the loader's least step alone, suggested there, was refused next (audit a3); and by
    `balancer.app.scenarios.load_trace_shape`, to name simulate's --step as its other refusals of a trace do."""

    def __init__(self, file: str | None, field: str, value: object, allowed: str, detail: str = "", *,
                 span_s: float, least_s: int, own_step_s: float | None) -> None:
        super().__init__(file, field, value, allowed, detail)
        self.span_s = span_s
        self.least_s = least_s
        self.own_step_s = own_step_s


class OwnStepTooFine(InputError):
    """`own_step`'s refusal of a trace whose own step is under 1s, loaded without a step or `coarsen_to`: told apart
    from the trace's other refusals by `balancer.app.scenarios.load_trace_shape` when a trace refused at the
    simulator's --step is loaded again at a finer step, to name the --step that plays it."""


def own_step(seconds: Decimal, step: pd.Timedelta | None, path: str, field: str, what: str,
             coarsen_to: float | None = None) -> pd.Timedelta:
    """A trace's own step (`what`: how it was read off the trace, e.g. the median gap between its times), held to what
    `parse_step` makes of a --step: whole microseconds, and without a `step` to resample to, at least 1s. Unrounded,
    a gap of 600.0000015 s was a step pandas refused to resample times held in microseconds at (a traceback);
    shorter than 1s, the trace loaded and the backtest refused it as too short ('a longer trace'), nothing naming the
    step. Computed once per load: it is both the step loaded at without --step and the one kept (`_own_step_of`).
    With `coarsen_to` a step under 1s is not refused: the trace loads at `coarsen_to` (`_load_step`)."""
    td = _whole_us(seconds)
    if step is None and coarsen_to is None and td < MIN_STEP:
        raise OwnStepTooFine(path, field, f"{float(seconds):g}s", "a trace whose own step is at least 1s, or a "
                             "--step of at least 1s to resample it", detail=f"{what}, the trace's step without --step")
    return td


def _load_step(own: pd.Timedelta, step: pd.Timedelta | None, coarsen_to: float | None, path: str) -> pd.Timedelta:
    """The step a trace whose own step is `own` loads at: `step` when given; else `coarsen_to` (seconds) where `own` is
    finer or under 1s, read as a --step is (`parse_step`: under 1s refused); else `own`. What `load_trace_shape`
    once had by loading the trace at its own step and, finer than the simulator's, again at that step: one parse."""
    if step is not None:
        return step
    if coarsen_to is not None and (own.total_seconds() < coarsen_to or own < MIN_STEP):
        return parse_step(repr(float(coarsen_to)), file=path)
    return own


def _load_servegen(path: str, step: pd.Timedelta | None, origin: pd.Timestamp,
                   coarsen_to: float | None = None) -> pd.Series:
    folder = Path(path)
    if not folder.is_dir():
        raise InputError(path, "trace", path, "a folder of ServeGen client CSV files")
    files = sorted(p for p in folder.iterdir() if p.suffix == ".csv")
    if not files:
        raise InputError(path, "trace", path, "a folder holding at least one ServeGen *.csv file")
    clients = []
    for f in files:
        try:
            df = pd.read_csv(f, header=None, usecols=[0, 1], low_memory=False)   # typed at once, as `read_rows`
        except _READ_ERRORS as exc:
            raise InputError(str(f), "file", f.name, "headerless rows window_start_s,rate_req_per_s,...",
                             detail=_one_line(exc)) from exc
        s, r = pd.to_numeric(df[0], errors="coerce"), pd.to_numeric(df[1], errors="coerce")
        bad_start = ~np.isfinite(s.to_numpy(float)) | (s.abs() > MAX_EPOCH_S).to_numpy() | booleans(df[0]).to_numpy()
        bad_rate = ~np.isfinite(r.to_numpy(float)) | (r < 0).to_numpy() | (r > MAX_RPS).to_numpy()
        bad_rate |= booleans(df[1]).to_numpy()
        if (bad_start | bad_rate).any():
            row = int(np.flatnonzero(bad_start | bad_rate)[0])
            col, column = ("window_start_s", 0) if bad_start[row] else ("rate_req_per_s", 1)
            raise InputError(str(f), col, cell_value(df, column, row), "finite numbers; |window_start_s| < 4.1e9, "
                             f"0 <= rate <= {MAX_RPS:g}", detail=f"row {row + 1}")
        clients.append(client_of(f, df, s, r))
    windows = client_windows(clients)
    try:
        first, native, total = sum_on_grid([(c.starts, c.rates) for c in clients], windows, max_cells=MAX_STEPS)
    except TooManyCells as exc:
        raise InputError(path, "window_start_s", "windows spanning too long", f"at most {MAX_STEPS} windows over "
                         "the clients' span", detail=str(exc)) from exc
    index = origin + pd.to_timedelta(first + native * np.arange(len(total)), unit="s")
    series = pd.Series(total, index=index)
    return _at_load_step(series, Decimal(repr(float(native))), step, path, "window_start_s", "the clients' window",
                         coarsen_to)


def _load_requests(path: str, step: pd.Timedelta | None, coarsen_to: float | None = None) -> pd.Series:
    df, cols = _read_table(path, "a readable UTF-8 CSV with a timestamp column")
    if "timestamp" not in cols:
        raise InputError(path, "header", list(df.columns), "a column named 'timestamp' (any case)")
    if df.empty:
        raise InputError(path, "rows", 0, "at least one request")
    index = to_utc(df[cols["timestamp"]], path, "timestamp")
    _not_a_demand_trace(df, cols, index, path)
    step = _load_step(pd.Timedelta("1min"), step, coarsen_to, path)   # a log's own step: 1 min
    rps = _regular(pd.Series(1.0, index=index), step, "sum", path).fillna(0.0) / step.total_seconds()
    if index.min() > rps.index[0]:   # the first step began before the log's first request: partly seen
        rps.iloc[0] = np.nan
    rps.iloc[-1] = np.nan   # the last ends after the log's last request
    return rps


def _not_a_demand_trace(df: pd.DataFrame, cols: dict[str, str], index: pd.DatetimeIndex, path: str) -> None:
    """One rule: a `value` column of numbers whose distinct times are evenly spaced (`_evenly_spaced`), each given the
    same number k of times, is one or k series sampled together, a demand trace for `--format csv` (k > 1: export one
    series, such as `sum(...)`); a requests log whose `value` is per-request data is read once `value` is renamed or
    dropped. Read as a log, its rows were counted and `value` ignored: a trace of 5,000 req/s backtested as one
    request a step, two series every 60 s as 0.033 req/s (exit 0; audit s38).

    Nothing else is asked, at any spacing and whatever the other columns: a rule that also weighed how many distinct
    values a label column had, or whether a column besides timestamp and value existed, flipped on rounding a latency
    column or adding a 0/1 `up` (audit a20). Real logs' per-time counts vary (Poisson arrivals), so they are counted;
    a log with a numeric `value` at an exact rate (exactly 5 requests each second, one every 200 ms), or each time
    once with gaps varying by under half their mean (one client waiting 1-3 s between requests), is refused, its
    `value` to be renamed. A series with one row given twice, or k series one of which missed a scrape, have uneven
    counts and are counted as a log."""
    if "value" not in cols:
        return
    times, counts = np.unique(index.as_unit("ns").asi8, return_counts=True)
    k = int(counts[0])
    if (counts != k).any() or not _evenly_spaced(np.diff(times)):
        return
    column = df[cols["value"]]
    given = int(column.notna().sum())
    if not given or pd.to_numeric(column, errors="coerce").notna().sum() != given:
        return
    sampled, series = ("each time once and evenly spaced, is a demand trace: --format csv", "") if k == 1 else (
        "the same number of rows at each of its evenly spaced times, is series sampled together: export one series, "
        "such as sum(...) of them, and read it with --format csv", f"each of its {times.size} times given {k} times: "
        f"{k} series; ")
    raise InputError(path, "value", f"a column of {given} numbers", "a requests log: one row per request, no 'value' "
                     f"column (a file with a numeric value column, {sampled})", detail=f"{series}--format requests "
                     "counts rows and would ignore 'value'; a requests log: rename or drop `value`")


def _evenly_spaced(gaps: np.ndarray) -> bool:
    """True when the gaps between sorted distinct times vary by less than half their mean (coefficient of
    variation < 0.5), as a demand trace's do: sampled each minute and jittered by up to 29 s either way, about 0.4;
    arrivals do not (a Poisson log: about 1). Judged by the share of gaps within 10% of the median instead, a trace
    jittered by 15 s was taken for arrivals, its rows counted and `value` ignored (exit 0; audit s37a10)."""
    gaps = gaps.astype(float)
    if gaps.size == 0:
        return True
    return bool(np.std(gaps) < 0.5 * np.mean(gaps))


def _origin(origin: str | pd.Timestamp | None, path: str) -> pd.Timestamp:
    """ServeGen's window_start_s = 0 as a UTC time from 1970 to 2100: a year such as 9999 overflowed pandas'
    nanosecond times (a traceback) once the windows were added to it."""
    allowed = "an ISO-8601 timestamp from 1970 to 2100"
    if isinstance(origin, str) and origin.strip().lower() in _CLOCK_WORDS:   # the wall clock: a backtest not repeatable
        raise InputError(path, "origin", origin, allowed)
    try:
        org = SERVEGEN_EPOCH if origin is None else pd.Timestamp(origin)
    except (ValueError, TypeError, OverflowError) as exc:   # OutOfBoundsDatetime is a ValueError
        raise InputError(path, "origin", origin, allowed) from exc
    if pd.isna(org):
        raise InputError(path, "origin", origin, allowed)
    org = org.tz_localize("UTC") if org.tzinfo is None else org.tz_convert("UTC")
    if not 0 <= org.timestamp() <= MAX_EPOCH_S:
        raise InputError(path, "origin", origin, allowed)
    return org


def load_demand(path: str | os.PathLike, fmt: str = "csv", step: str | None = None,
                origin: str | pd.Timestamp | None = None, *, coarsen_to: float | None = None) -> pd.Series:
    """Load a demand trace as req/s on a regular tz-aware UTC index (NaN where missing).

    `coarsen_to` (seconds; not with `step`): the trace at its own step, or at `coarsen_to` where its own is finer (or
    under 1s), averaged (a requests log counted) as at that `step`: a simulator playing the trace at its step reads
    it once. Loading it at its own step and again at the coarser one parsed a 5M-row log twice (about 10 s). With
    `coarsen_to`, a csv or ServeGen trace observed only as 0 is refused as having no positive demand before it is
    refused as under two steps or too long (`_at_load_step`): the simulator plays it at no step (a requests log's
    rows are each a request)."""
    path = str(path)
    if step is not None and coarsen_to is not None:
        raise TypeError("load_demand: step or coarsen_to, not both")
    if fmt not in FORMATS:
        raise InputError(path, "format", fmt, ", ".join(FORMATS))
    if not os.path.exists(path):
        raise InputError(path, "trace", path, "an existing file or folder")
    td = parse_step(step, file=path) if step is not None else None
    if fmt == "csv":
        out = _load_csv(path, td, coarsen_to)
    elif fmt == "servegen":
        out = _load_servegen(path, td, _origin(origin, path), coarsen_to)
    else:
        out = _load_requests(path, td, coarsen_to)
    own_s = float(out.attrs.get("own_step_s", 60.0))   # a requests log's own step: 1 min
    at_own = {"own": step is None and (coarsen_to is None or own_s >= coarsen_to), "own_step_s": own_s}
    if len(out) < 2:
        raise TooFewSteps(path, "rows", len(out), "a trace spanning at least two steps", **at_own)
    observed = int(out.notna().sum())
    if observed < 2:   # all empty: every model and score came out NaN under numpy's 'Mean of empty slice'
        raise TooFewSteps(path, "value", f"{observed} observed steps", "a trace with demand observed (not empty) "
                          "in at least two steps", detail="a requests log's first and last steps, partly covered, "
                          "are not observed" if fmt == "requests" else "", **at_own)
    return out


def mask_outages(y: pd.Series, *, max_run: int | None = None, busy_share: float = 0.75) -> pd.Series:
    """NaN out short runs of exact zeros inside busy stretches (see the module docstring)."""
    step_s = _step_seconds(y)
    day = max(int(round(DAY_S / step_s)), 3)
    max_run = max_run if max_run is not None else _outage_steps(step_s)
    v = y.to_numpy(float)
    zero = v == 0.0
    if not zero.any():
        return y.copy()
    observed = ~np.isnan(v)
    kernel = np.ones(day)
    nonzero_share = np.convolve((observed & ~zero).astype(float), kernel, "same") / np.maximum(
        np.convolve(observed.astype(float), kernel, "same"), 1.0)
    edges = np.diff(np.concatenate([[0], zero.astype(np.int8), [0]]))
    starts, ends = np.flatnonzero(edges == 1), np.flatnonzero(edges == -1)
    out = v.copy()
    for s, e in zip(starts, ends):
        if e - s <= max_run and nonzero_share[s:e].min() >= busy_share:
            out[s:e] = np.nan
    return pd.Series(out, index=y.index, name=y.name)


def clip_bursts(y: pd.Series, *, q: float = 0.99, factor: float = 1.0) -> pd.Series:
    """Clip at `factor` x the trailing one-day `q` quantile (causal: uses only the past)."""
    day = max(int(round(DAY_S / _step_seconds(y))), 3)
    cap = y.rolling(day, min_periods=max(day // 4, 2)).quantile(q).shift(1) * factor
    return y.where(~(y > cap), cap)


def clean_for_fit(y: pd.Series) -> pd.Series:
    """The series models are fitted on: outages masked, bursts clipped."""
    return clip_bursts(mask_outages(y))


class CausalClean:
    """`clean_for_fit` of ``y[:o + 1]`` for any origin o, as a live forecaster at o cleans what it has seen.

    Cleaning the whole trace once let the future decide the past's mask: a zero run was an outage (NaN) or idle
    time (kept) depending on how long it went on after o and on the demand in the half day after it. The whole
    trace's cleaning is right for an origin whose last zero lies more than a day (plus the longest outage) back;
    otherwise only the last days are cleaned again from what precedes o."""

    def __init__(self, y: pd.Series) -> None:
        self.y = y
        self.full = clean_for_fit(y)
        step_s = _step_seconds(y)
        day = max(int(round(DAY_S / step_s)), 3)
        self.margin = day + _outage_steps(step_s) + 2   # a mask differs at most this far back from o
        zero = np.flatnonzero(y.to_numpy(float) == 0.0)
        last = np.full(len(y), -(10 ** 12), dtype=np.int64)
        last[zero] = zero
        self.last_zero = np.maximum.accumulate(last)
        self.day = day

    def at(self, o: int) -> pd.Series:
        if o - self.last_zero[o] > self.margin:
            return self.full.iloc[: o + 1]
        cut = max(o - self.margin, 0)   # from here on the values may differ from the whole trace's cleaning
        lo = max(cut - self.margin - self.day, 0)   # enough before `cut` for its mask and its burst cap
        tail = clean_for_fit(self.y.iloc[lo: o + 1]).iloc[cut - lo:]
        out = pd.concat([self.full.iloc[:cut], tail])
        out.index.freq = self.y.index.freq
        return out


def _outage_steps(step_s: float) -> int:
    return max(int(round(6 * 3600 / step_s)), 1)


def _step_seconds(y: pd.Series) -> float:
    if isinstance(y.index, pd.DatetimeIndex) and y.index.freq is not None:
        return pd.Timedelta(y.index.freq).total_seconds()
    if isinstance(y.index, pd.DatetimeIndex) and len(y) > 1:
        return float(np.median(np.diff(y.index.as_unit("ns").asi8))) / 1e9
    return 600.0
