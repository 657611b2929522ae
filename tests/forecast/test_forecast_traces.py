"""Loading traces in the three formats, invalid files, and the outage / burst cleaning rules."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from balancer.errors import InputError
from balancer.forecast.traces import SERVEGEN_EPOCH, clip_bursts, load_demand, mask_outages


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


CSV_CASES = [
    ("iso timestamps", "timestamp,value\n2024-03-01T00:00:00Z,10\n2024-03-01T00:10:00Z,20\n2024-03-01T00:20:00Z,30\n"),
    ("epoch seconds", "timestamp,value\n1709251200,10\n1709251800,20\n1709252400,30\n"),
    ("naive iso taken as utc",
     "timestamp,value\n2024-03-01 00:00:00,10\n2024-03-01 00:10:00,20\n2024-03-01 00:20:00,30\n"),
]


@pytest.mark.parametrize(("case", "text"), CSV_CASES, ids=[c[0] for c in CSV_CASES])
def test_csv_traces_load_as_utc_req_per_second(tmp_path, case, text):
    y = load_demand(_write(tmp_path / "d.csv", text), "csv")
    assert str(y.index.tz) == "UTC"
    assert y.index[0] == pd.Timestamp("2024-03-01T00:00:00Z")
    assert list(y) == [10.0, 20.0, 30.0]


def test_csv_resampled_to_the_requested_step_with_nan_for_missing_windows(tmp_path):
    text = "timestamp,value\n" + "\n".join(f"{1709251200 + 60 * i},{i}" for i in range(10) if i not in (4, 5, 6))
    y = load_demand(_write(tmp_path / "d.csv", text), "csv", step="2min")
    assert pd.Timedelta(y.index.freq) == pd.Timedelta("2min")
    assert y.iloc[0] == 0.5 and np.isnan(y.iloc[2]) and y.iloc[4] == 8.5


BAD = [
    ("missing column", "time,value\n1,2\n", "header"),
    ("negative demand", "timestamp,value\n1709251200,1\n1709251800,-3\n", "value"),
    ("text demand", "timestamp,value\n1709251200,1\n1709251800,lots\n", "value"),
    ("bad timestamp", "timestamp,value\n2024-03-01T00:00:00Z,1\nyesterday,2\n", "timestamp"),
    ("infinite demand", "timestamp,value\n0,inf\n600,1\n", "value"),
    ("epoch after 2100", "timestamp,value\n0,1\n1e30,1\n", "timestamp"),
    ("negative epoch", "timestamp,value\n-1e12,1\n0,1\n", "timestamp"),
]


@pytest.mark.parametrize(("case", "text", "field"), BAD, ids=[b[0] for b in BAD])
def test_invalid_csv_names_the_file_and_field(tmp_path, case, text, field):
    path = _write(tmp_path / "bad.csv", text)
    with pytest.raises(InputError) as err:
        load_demand(path, "csv")
    assert err.value.field == field and err.value.file == path


@pytest.mark.parametrize("step", ["1ns", "0s"], ids=["a nanosecond step", "a zero step"])
def test_steps_below_a_second_are_input_errors(tmp_path, step):
    with pytest.raises(InputError) as err:
        load_demand(_write(tmp_path / "d.csv", "timestamp,value\n0,1\n6000000,1\n"), "csv", step=step)
    assert err.value.field == "step"


def test_unknown_format_and_missing_file_are_input_errors(tmp_path):
    with pytest.raises(InputError, match="format"):
        load_demand(_write(tmp_path / "a.csv", "timestamp,value\n1,1\n"), "parquet")
    with pytest.raises(InputError, match="trace"):
        load_demand(tmp_path / "nothing.csv", "csv")


def test_servegen_clients_are_summed_per_window_from_the_documented_epoch(tmp_path):
    (tmp_path / "chunk-0-trace.csv").write_text("0,1.5,1,Gamma,1,1\n600,2.0,1,,0,0\n1200,0,0,,0,0\n")
    (tmp_path / "chunk-1-trace.csv").write_text("0,0.5,1,Weibull,1,1\n600,1.0,1,,0,0\n1200,3,0,,0,0\n")
    y = load_demand(tmp_path, "servegen")
    assert y.index[0] == SERVEGEN_EPOCH and SERVEGEN_EPOCH.day_name() == "Monday"
    assert list(y) == [2.0, 3.0, 3.0]
    moved = load_demand(tmp_path, "servegen", origin="2025-06-01T08:00:00Z")
    assert moved.index[0] == pd.Timestamp("2025-06-01T08:00:00Z")


def test_servegen_rejects_a_non_numeric_rate_with_its_row(tmp_path):
    (tmp_path / "c.csv").write_text("0,1,1,,0,0\n600,x,1,,0,0\n")
    with pytest.raises(InputError) as err:
        load_demand(tmp_path, "servegen")
    assert err.value.field == "rate_req_per_s" and "row 2" in str(err.value)


def test_requests_are_counted_per_step_as_req_per_second(tmp_path):
    rows = ["TIMESTAMP,ContextTokens", "2023-11-16 18:00:00,10"]
    rows += [f"2023-11-16 18:01:{s:02d}.5,10" for s in range(0, 60, 2)] + ["2023-11-16 18:02:30,5"]
    rows += ["2023-11-16 18:03:10,5"]
    y = load_demand(_write(tmp_path / "r.csv", "\n".join(rows) + "\n"), "requests", step="1min")
    # the last step, covered only to its first 10 s, is not observed (test_forecast_requests_partial_steps.py)
    assert list(y.iloc[:-1]) == [1 / 60, 30 / 60, 1 / 60] and np.isnan(y.iloc[-1])


def _busy(n=288, level=100.0):
    idx = pd.date_range("2024-01-01", periods=n, freq="10min", tz="UTC")
    return pd.Series(np.full(n, level), index=idx)


ZERO_CASES = [
    ("a short zero run in busy demand is an outage", 100.0, (100, 104), True),
    ("a single zero in busy demand is an outage", 100.0, (50, 51), True),
    ("a zero spell longer than six hours is real idleness", 100.0, (100, 150), False),
]


@pytest.mark.parametrize(("case", "level", "run", "masked"), ZERO_CASES, ids=[c[0] for c in ZERO_CASES])
def test_outage_rule(case, level, run, masked):
    y = _busy(level=level)
    y.iloc[run[0]:run[1]] = 0.0
    out = mask_outages(y)
    assert bool(out.iloc[run[0]:run[1]].isna().all()) is masked
    assert out.drop(out.index[run[0]:run[1]]).notna().all()


def test_zeros_of_a_mostly_idle_service_are_kept():
    y = _busy()
    y.iloc[::4] = 5.0
    y[y == 100.0] = 0.0  # idle 75% of the time
    assert mask_outages(y).notna().all()


def test_bursts_are_clipped_for_fitting_only_from_the_past():
    y = _busy(n=400) + np.random.default_rng(0).normal(0, 2, 400)
    y.iloc[300] = 5000.0
    clipped = clip_bursts(y)
    assert clipped.iloc[300] < 200 and clipped.iloc[299] == y.iloc[299]


SHARED = Path(os.environ.get("GPUTIDE_SHARED_DATA", Path(__file__).resolve().parents[2] / ".." / "shared" / "data"))


@pytest.mark.skipif(not (SHARED / "servegen-language" / "m-small").is_dir(), reason="shared ServeGen data missing")
def test_real_servegen_trace_loads_with_its_outages_found():
    y = load_demand(SHARED / "servegen-language" / "m-small", "servegen")
    assert len(y) == 2016 and (y == 0).sum() > 10
    masked = mask_outages(y)
    assert masked.isna().sum() == (y == 0).sum()  # every zero of this busy trace is a short outage
