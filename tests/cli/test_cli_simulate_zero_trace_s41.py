"""`simulate --trace` refuses a trace observed only as 0 (its other values empty) as having no positive demand at the
first --step (session 41). Before, at a --step it spans under two of, it was refused as too few steps and told a
--step that plays it ('a --step of 60 seconds plays it'); at that --step it was then refused as 'no positive demand',
the refusal it had been true of it all along."""

from __future__ import annotations

import pytest

from balancer.cli import main

START = 1704067200   # 2024-01-01T00:00:00Z

NO_DEMAND = "field 'value': invalid value 'no positive demand'; allowed: a trace with positive demand values"


def _simulate(tmp_path, trace, step, fmt):
    return main(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.02", "--no-plots",
                 "--out", str(tmp_path / f"out{step}"), "--trace", str(trace), "--format", fmt, "--step", str(step)])


def _csv(tmp_path):
    trace = tmp_path / "zero.csv"
    trace.write_text("timestamp,value\n" + f"{START},0\n{START + 60},0\n{START + 120},\n")
    return trace


def _servegen(tmp_path):
    folder = tmp_path / "sg"
    folder.mkdir()
    for k in range(2):
        (folder / f"client{k}.csv").write_text("".join(f"{i * 60},0,1,gamma,1,1\n" for i in range(2)))
    return folder


@pytest.mark.parametrize("make, fmt", [pytest.param(_csv, "csv", id="csv: 0, 0 and an empty value a minute apart"),
                                       pytest.param(_servegen, "servegen", id="servegen: two clients at rate 0")])
@pytest.mark.parametrize("step", [600, 120, 60])
def test_a_trace_observed_only_as_zero_is_refused_as_no_demand_at_any_step(tmp_path, capsys, make, fmt, step):
    trace = make(tmp_path)
    assert _simulate(tmp_path, trace, step, fmt) == 2
    err = capsys.readouterr().err
    assert f"{trace}: {NO_DEMAND}" in err, err
    assert "--step" not in err


def test_a_decade_of_zeros_is_refused_as_no_demand_not_told_a_step(tmp_path, capsys):
    """Too long at --step 60 (5,256,010 steps over its span), it was told 'a --step of at least 64 seconds loads it',
    and at --step 64 refused as having no positive demand (audit a3): the rows are judged before they are resampled."""
    trace = tmp_path / "decade.csv"
    rows = [START + 30 * i for i in range(20)] + [START + 3650 * 86400]
    trace.write_text("timestamp,value\n" + "".join(f"{t},0\n" for t in rows))
    assert _simulate(tmp_path, trace, 60, "csv") == 2
    err = capsys.readouterr().err
    assert f"{trace}: {NO_DEMAND}" in err, err
    assert "--step" not in err
