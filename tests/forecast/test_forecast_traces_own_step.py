"""A trace's own step (no --step: the median gap between its times, or the ServeGen clients' window) is held to what
`parse_step` makes of a --step: whole microseconds, at least 1s.

Before (auditor s35s2): times 600.0000015 s apart gave a step of 600000001500 ns, which pandas refused to resample
microsecond times at (a ValueError traceback, exit 1); times a microsecond apart loaded at a 1 µs step and the
backtest refused the trace as 'a longer trace', nothing naming the step."""

from __future__ import annotations

import pandas as pd
import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand, parse_step

HALF_US = ("timestamp,value\n2024-01-01T00:00:00.000000Z,1\n2024-01-01T00:10:00.000001Z,2\n"
           "2024-01-01T00:20:00.000003Z,3\n")   # gaps 600.000001 s and 600.000002 s: median 600.0000015 s
ALLOWED = "a trace whose own step is at least 1s, or a --step of at least 1s to resample it"


def test_a_median_gap_between_microseconds_is_rounded_as_a_step_given(tmp_path):
    path = tmp_path / "halfus.csv"
    path.write_text(HALF_US)
    y = load_demand(path)
    assert y.index.freq == parse_step("600.0000015") == pd.Timedelta(microseconds=600_000_002)
    assert y.tolist() == load_demand(path, step="600.0000015").tolist() == [1.0, 2.0, 3.0]


@pytest.mark.parametrize(("text", "value"), [
    ("timestamp,value\n2024-01-01T00:00:00Z,1\n2024-01-01T00:00:00.000001Z,2\n", "1e-06s"),
    ("timestamp,value\n" + "".join(f"2024-01-01T00:00:{i / 2:04.1f}Z,{i}\n" for i in range(10)), "0.5s"),
    ("timestamp,value\n1704067200.0000001,1\n1704067200.0000002,2\n", "2.38e-07s"),
], ids=["a microsecond", "half seconds", "epoch floats"])
def test_a_trace_whose_times_lie_under_a_second_apart_is_refused_naming_its_gap(tmp_path, capsys, text, value):
    path = tmp_path / "tiny.csv"
    path.write_text(text)
    with pytest.raises(InputError) as info:
        load_demand(path)
    assert (info.value.file, info.value.field, info.value.value, info.value.allowed) == (
        str(path), "timestamp", value, ALLOWED)
    assert "median gap" in info.value.detail
    assert main(["forecast", "backtest", "--models", "persistence", "--trace", str(path)]) == 2
    err = capsys.readouterr().err
    assert "a longer trace" not in err and ALLOWED in err and "Traceback" not in err


def test_a_servegen_window_under_a_second_is_refused_naming_it(tmp_path):
    folder = tmp_path / "sg"
    folder.mkdir()
    (folder / "a.csv").write_text("".join(f"{i / 2},{i},1,x,1,1\n" for i in range(10)))
    with pytest.raises(InputError) as info:
        load_demand(folder, "servegen")
    assert (info.value.field, info.value.value, info.value.allowed) == ("window_start_s", "0.5s", ALLOWED)
