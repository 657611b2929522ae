"""`gputide simulate --trace` of a demand trace finer than the simulator's --step is averaged onto that --step, as
`forecast backtest --step` resamples a trace (`load_demand`'s step), and runs (session 39, item 3; audit a9).

Before: the loader refused a trace whose own step is under 1 s ('a trace whose own step is at least 1s, or a --step
of at least 1s to resample it', exit 2), and simulate's --step, the simulator's own, never reached it: the trace had
no way in. Then only such a trace was averaged: one at 1 s to --step was sampled once a step, so a trace
alternating 10 and 14 each second played 10 throughout at --step 60 where the same at 0.5 s played 12, and a
requests log, counted per minute, was sampled alike at a coarser --step (audit a9).
"""

from __future__ import annotations

import csv

import numpy as np
import pytest

from balancer.app.scenarios import demand_from_trace
from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand

START = 1704067200   # 2024-01-01T00:00:00Z, a whole minute
MINUTES = 60


def _fine_trace(path, per_s=2):
    """One hour, `per_s` rows a second (2: at 0.5 s): in minute m, rows alternating 10 + 3m and 14 + 3m (their mean
    12 + 3m)."""
    n = 60 * per_s   # rows a minute
    path.write_text("timestamp,value\n" + "".join(f"{START + i / per_s:.1f},{10 + 3 * (i // n) + 4 * (i % 2)}\n"
                                                  for i in range(MINUTES * n)))
    return path


def _demand(out):
    with open(out / "timeseries.csv") as fh:
        return [float(row["demand_rps"]) for row in csv.DictReader(fh)]


def _simulate(tmp_path, name, trace, *extra):
    return main(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.02", "--no-plots",
                 "--out", str(tmp_path / name), "--trace", str(trace), *extra])


@pytest.mark.parametrize("per_s", [pytest.param(2, id="at 0.5 s"), pytest.param(1, id="at 1 s")])
def test_a_fine_trace_runs_as_the_same_trace_averaged_to_the_simulators_step(tmp_path, capsys, per_s):
    fine = _fine_trace(tmp_path / "fine.csv", per_s)
    minute = tmp_path / "minute.csv"   # the same demand, averaged by hand onto the simulator's 60 s step
    minute.write_text("timestamp,value\n" + "".join(f"{START + 60 * m},{12 + 3 * m}\n" for m in range(MINUTES)))
    assert _simulate(tmp_path, "fine", fine, "--step", "60") == 0, capsys.readouterr().err
    assert _simulate(tmp_path, "minute", minute, "--step", "60") == 0, capsys.readouterr().err
    assert "error" not in capsys.readouterr().err
    demand = _demand(tmp_path / "fine")
    assert demand == _demand(tmp_path / "minute") and len(set(demand)) > 10


def test_a_servegen_folder_of_half_second_windows_runs(tmp_path, capsys):
    folder = tmp_path / "sg"
    folder.mkdir()
    (folder / "a.csv").write_text("".join(f"{i / 2},{1 + i % 7},1,x,1,1\n" for i in range(7200)))
    assert _simulate(tmp_path, "o", folder, "--format", "servegen", "--step", "30") == 0, capsys.readouterr().err
    assert (tmp_path / "o" / "summary.json").exists()


def test_the_curve_is_the_trace_loaded_at_the_given_step_and_without_one_the_trace_is_still_refused(tmp_path):
    fine = _fine_trace(tmp_path / "fine.csv")
    curve = demand_from_trace(str(fine), 100.0, step_s=60.0)
    y = load_demand(fine, step="60").to_numpy()
    assert [curve(START + 60 * m + 30) for m in range(MINUTES)] == pytest.approx(list(y * 100.0 / y.max()))
    assert np.allclose(y, [12 + 3 * m for m in range(MINUTES)])
    with pytest.raises(InputError, match="a trace whose own step is at least 1s"):
        demand_from_trace(str(fine), 100.0)


def test_a_requests_log_is_counted_per_step_not_sampled_once_a_step(tmp_path):
    """1 req/s in even minutes and 3 req/s in odd ones: 2 req/s in every 120 s step, at the step's start or not."""
    log = tmp_path / "requests.csv"
    log.write_text("timestamp\n" + "".join(f"{START + 60 * m + i / (1 + 2 * (m % 2)):.3f}\n" for m in range(MINUTES)
                                           for i in range(60 * (1 + 2 * (m % 2)))))
    curve = demand_from_trace(str(log), 100.0, "requests", step_s=120.0)
    assert [curve(START + 60 * k) for k in range(MINUTES)] == pytest.approx([100.0] * MINUTES)
