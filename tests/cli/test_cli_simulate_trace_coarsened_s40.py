"""`simulate --trace` (hotspot) plays a csv trace at a --step coarser than its own step even where its own step
leaves it under two observed steps, as `forecast backtest --step` does: accepted behaviour since 31ff8771 (audit a6).

The trace: rows every 7 s from START with empty values, and demand only at START+29 and START+31, both in one 7 s step
(29 and 31 s past a time 3 s past a multiple of 7) but in two 10 s ones. Before 31ff8771 the simulator loaded it at its
own step first, found '1 observed steps' and refused it (exit 2) at every --step; loaded at --step in one parse
(`load_demand(coarsen_to=)`), it plays at --step 10 and 30. At a --step holding both values in one step it is still
refused (exit 2), by the loader's refusal of it at its own step."""

from __future__ import annotations

import pytest

from balancer.cli import main

START = 1704067200   # 2024-01-01T00:00:00Z: a multiple of 60 and 3600, 3 past a multiple of 7


def _simulate(tmp_path, trace, step):
    return main(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.02", "--no-plots",
                 "--out", str(tmp_path / f"out{step}"), "--trace", str(trace), "--format", "csv", "--step", str(step)])


@pytest.fixture
def trace(tmp_path):
    rows = sorted([(START + 7 * i, "") for i in range(20)] + [(START + 29, "12"), (START + 31, "14")])
    path = tmp_path / "seven.csv"
    path.write_text("timestamp,value\n" + "".join(f"{t},{v}\n" for t, v in rows))
    return path


@pytest.mark.parametrize("step", [10, 30])
def test_a_trace_observed_in_one_own_step_plays_at_a_step_splitting_its_values(tmp_path, capsys, trace, step):
    assert _simulate(tmp_path, trace, step) == 0, capsys.readouterr().err
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize("step", [7, 20, 60, 3600])
def test_it_is_refused_at_a_step_holding_its_values_in_one_step(tmp_path, capsys, trace, step):
    assert _simulate(tmp_path, trace, step) == 2
    err = capsys.readouterr().err
    assert f"{trace}: field 'value': invalid value '1 observed steps'" in err, err
