"""A step or horizon in days ("8d", "1d12h") reads as pandas' "D": the lower-case day unit is deprecated (a
Pandas4Warning, removed in pandas 4), and the CLI's `--horizons 1h,8d` must keep working after that."""

from __future__ import annotations

import warnings

import pandas as pd
import pytest

from balancer.forecast.traces import parse_step


@pytest.mark.parametrize(("text", "seconds"), [("8d", 8 * 86400), ("1d12h", 36 * 3600), (" 2 d", 2 * 86400),
                                                ("2 days", 2 * 86400), ("10min", 600)])
def test_day_units_read_without_a_deprecation(text, seconds) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert parse_step(text) == pd.Timedelta(seconds=seconds)
