"""A requests log with exactly `timestamp,value` columns (value = tokens a request) and unique times is read as a
requests log when its times are arrivals, not evenly spaced samples (audit s37a9 item 1).

Before: any `timestamp,value` file with each time once was refused as a demand trace, so a light log stamped in
microseconds, its requests never sharing a time, could not be read at all. A demand trace, its times regular
(jittered a few seconds around each minute, as a scrape is), is still refused, the message saying how to keep a
requests log's column.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import load_demand


def test_poisson_arrivals_with_unique_microsecond_times_and_a_value_column_are_counted(tmp_path):
    rng = np.random.default_rng(7)
    start = pd.Timestamp("2024-01-01T00:00:00Z")
    times = start + pd.to_timedelta(np.cumsum(rng.exponential(2.0, 2000)), unit="s")
    stamps = [t.isoformat(timespec="microseconds") for t in times]
    assert len(set(stamps)) == len(stamps)
    log = tmp_path / "r.csv"
    log.write_text("timestamp,value\n" + "".join(f"{s},{rng.integers(10, 2000)}\n" for s in stamps))
    y = load_demand(log, "requests", step="5min")
    assert y.notna().sum() >= 2
    assert y.dropna().between(0.2, 0.8).all(), y.dropna()   # about 0.5 req/s: rows counted, not values read


def test_a_jittered_regular_timestamp_value_trace_is_still_refused(tmp_path):
    rng = np.random.default_rng(5)
    times = 1704067200 + 60 * np.arange(300) + rng.uniform(-5, 5, 300)
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{t:.3f},{100 + i % 7}\n" for i, t in enumerate(times)))
    with pytest.raises(InputError) as info:
        load_demand(trace, "requests")
    message = str(info.value)
    assert "field 'value'" in message and "--format csv" in message, message
    assert "a requests log: rename or drop `value`" in message, message


@pytest.mark.parametrize("jitter", [15, 29])
def test_a_trace_jittered_by_up_to_half_its_step_is_still_refused(tmp_path, jitter):
    """Sampled each minute, each time up to `jitter` s off (audit s37a10: 15 s was taken for arrivals, its rows
    counted: 100 req/s read as 0.0167, exit 0)."""
    rng = np.random.default_rng(11)
    times = 1704067200 + 60 * np.arange(500) + rng.uniform(-jitter, jitter, 500)
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{t:.3f},100\n" for t in times))
    with pytest.raises(InputError, match="--format csv"):
        load_demand(trace, "requests")
