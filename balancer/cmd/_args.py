"""Command-line values every sub-command checks the same way, before any work starts.

argparse turns `--seed -1`, `--speed nan` or `--json /no/such/dir/x.json` into values without a word; numpy then
raises on the seed, a NaN speed runs a clock that never advances, and an unwritable output path fails after
minutes of work, each as a traceback. These helpers turn them into `InputError`s naming the flag, the value and
what is allowed (exit code 2). (The module name starts with `_`: `balancer.cli` does not take it for a
sub-command.)
"""

from __future__ import annotations

import math
import time
from datetime import UTC, datetime
from pathlib import Path

from balancer.errors import InputError

MAX_EPOCH_S = 4102444800.0  # 2100-01-01


def seed(value: int, flag: str = "--seed") -> int:
    """A random seed: numpy takes any integer >= 0 and raises on a negative one."""
    if value < 0:
        raise InputError(None, flag, value, "an integer >= 0")
    return value


def number(value: float, flag: str, lo: float, hi: float = math.inf, *, above: bool = False,
           unit: str = "") -> float:
    """`value` when finite and from `lo` (exclusive with `above`) to `hi`; NaN and inf never pass."""
    low_ok = value > lo if above else value >= lo
    if not (math.isfinite(value) and low_ok and value <= hi):
        bound = f"{'>' if above else '>='} {lo:g}" + (f" and <= {hi:g}" if math.isfinite(hi) else "")
        raise InputError(None, flag, value, f"a finite number {bound}{unit}")
    return value


def duration(text: str, flag: str, *, allow_zero: bool = False) -> float:
    """Seconds from `30s`, `1m`, `500ms` or a number; `inf` (which float() reads) is not a duration."""
    from balancer.cmd.run import parse_interval

    value = parse_interval(text, flag, allow_zero=allow_zero)
    if not math.isfinite(value):
        raise InputError(None, flag, text, "a finite duration such as 30s, 1m or 500ms")
    return value


def epoch(text: str | None, flag: str) -> float:
    """A time as epoch seconds from `now` (or None), epoch seconds or ISO-8601 (naive: UTC), 1970 to 2100."""
    if text is None or text == "now":
        return time.time()
    allowed = "now, epoch seconds or an ISO-8601 time, from 1970 to 2100"
    try:
        value = float(text)
    except ValueError:
        try:
            stamp = datetime.fromisoformat(text)
        except ValueError as exc:
            raise InputError(None, flag, text, allowed) from exc
        value = (stamp if stamp.tzinfo else stamp.replace(tzinfo=UTC)).timestamp()
    if not 0 <= value <= MAX_EPOCH_S:   # NaN fails too
        raise InputError(None, flag, text, allowed)
    return value


def output_file(path: str | None, flag: str) -> str | None:
    """A file to write at the end of a run, checked at its start: not a folder, in a folder that exists."""
    if path is None or path == "-":
        return path
    target = Path(path)
    if target.is_dir() or not target.parent.is_dir():
        raise InputError(None, flag, path, "a writable file path in an existing folder")
    return path


def output_dir(path: str, flag: str) -> str:
    """A folder to write into (created if missing): neither it nor any folder above it may be a file."""
    for p in (Path(path), *Path(path).absolute().parents):
        if p.exists():
            if not p.is_dir():
                raise InputError(None, flag, path, "a folder, or a path where one can be created")
            break
    return path
