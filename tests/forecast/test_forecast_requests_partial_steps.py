"""A requests log's steps it covers only in part are not observed (NaN, as a gap), never counted as demand.

Before (auditor s35s2): each step's requests were divided by the whole step, so a step the log began or ended in
undercounted the demand: 630 s of 1 req/s loaded as [1.00, 0.05] at a 10-minute step, a last step read as a 95%
drop that models fitted and scores counted."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand

START = 1704067200   # 2024-01-01T00:00:00Z, on every step's boundary


def _log(tmp_path, seconds, start=START):
    path = tmp_path / "requests.csv"
    path.write_text("timestamp\n" + "".join(f"{start + s}\n" for s in seconds))
    return path


def _steps(y):
    return [None if np.isnan(v) else round(float(v), 6) for v in y]


def test_the_step_a_log_ends_in_is_not_observed(tmp_path):
    path = _log(tmp_path, range(630))   # 630 s of 1 req/s
    assert _steps(load_demand(path, "requests", step="5min")) == [1.0, 1.0, None]
    assert _steps(load_demand(path, "requests", step="1min")) == [1.0] * 10 + [None]


def test_the_step_a_log_begins_in_is_not_observed_unless_it_begins_at_its_start(tmp_path):
    path = _log(tmp_path, range(45, 1300), start=START)   # from 00:00:45 to 00:21:39
    assert _steps(load_demand(path, "requests", step="5min")) == [None, 1.0, 1.0, 1.0, None]


def test_a_log_too_short_for_two_whole_steps_is_refused_saying_why(tmp_path):
    path = _log(tmp_path, range(630))
    with pytest.raises(InputError) as info:
        load_demand(path, "requests", step="10min")
    assert (info.value.field, info.value.value) == ("value", "1 observed steps")
    assert "first and last steps, partly covered, are not observed" in info.value.detail
