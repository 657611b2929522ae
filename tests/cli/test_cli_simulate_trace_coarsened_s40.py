"""`simulate --trace` (hotspot) plays a csv trace at a --step coarser than its own step even where its own step
leaves it under two observed steps, as `forecast backtest --step` does: accepted behaviour since 31ff8771 (audit a6).

The trace: rows every 7 s from START with empty values, and demand only at START+29 and START+31, both in one 7 s step
(29 and 31 s past a time 3 s past a multiple of 7) but in two 10 s ones. Before 31ff8771 the simulator loaded it at its
own step first, found '1 observed steps' and refused it (exit 2) at every --step; loaded at --step in one parse
(`load_demand(coarsen_to=)`), it plays at --step 10 and 30. At a --step holding both values in one step it is still
refused (exit 2), now naming --step and one that plays it: the coarsest up to the one given, else the finest above
it. Before, the loader's refusal at its own step ('field 'value': invalid value '1 observed steps'') stood, naming no
--step, though 10, 15, 19, 29, 30 and 551 play it. Where no whole --step splits its values (both in one second), that
refusal stands."""

from __future__ import annotations

import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand

START = 1704067200   # 2024-01-01T00:00:00Z: a multiple of 60 and 3600, 3 past a multiple of 7


def _simulate(tmp_path, trace, step, fmt="csv"):
    return main(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.02", "--no-plots",
                 "--out", str(tmp_path / f"out{step}"), "--trace", str(trace), "--format", fmt, "--step", str(step)])


def _seven(path, first=29, last=31):
    rows = sorted([(START + 7 * i, "") for i in range(20)] + [(START + first, "12"), (START + last, "14")])
    path.write_text("timestamp,value\n" + "".join(f"{t},{v}\n" for t, v in rows))
    return path


@pytest.fixture
def trace(tmp_path):
    return _seven(tmp_path / "seven.csv")


def _plays(trace, step, fmt="csv"):
    try:
        load_demand(trace, fmt, coarsen_to=float(step))
    except InputError:
        return False
    return True


@pytest.mark.parametrize("step", [10, 30])
def test_a_trace_observed_in_one_own_step_plays_at_a_step_splitting_its_values(tmp_path, capsys, trace, step):
    assert _simulate(tmp_path, trace, step) == 0, capsys.readouterr().err
    assert "error" not in capsys.readouterr().err


@pytest.mark.parametrize("step, named", [
    pytest.param(20, 19, id="--step 20: 19, the coarsest up to it"),
    pytest.param(60, 30, id="--step 60: 30, the coarsest up to it"),
    pytest.param(3600, 551, id="--step 3600: 551, the coarsest up to it"),
    pytest.param(7, 10, id="--step 7 (its own): 10, the finest above it"),
    pytest.param(5, 10, id="--step 5 (finer than its own): 10, the finest above it"),
])
def test_it_is_refused_at_a_step_holding_its_values_in_one_step_naming_one_that_plays_it(
        tmp_path, capsys, trace, step, named):
    assert _simulate(tmp_path, trace, step) == 2
    err = capsys.readouterr().err
    assert f"{trace}: field '--step': invalid value {float(step)!r}; allowed: a --step of {named} seconds plays it (" \
           in err, err
    assert "at its own 7s step" in err and "1 observed steps" in err, err
    assert _simulate(tmp_path, trace, named) == 0, capsys.readouterr().err
    between = range(named + 1, step + 1) if named <= step else range(step + 1, named)   # none plays
    assert step == 3600 or not any(_plays(trace, s) for s in between)   # 3049 loads at 3600: left out


def test_where_no_whole_step_splits_its_values_the_loaders_refusal_stands(tmp_path, capsys, trace):
    """Both values in one second (29.2 and 29.8 s past START): every whole --step holds them in one step, and the
    loader's refusal stands, where values a second apart (the fixture's) are refused naming a --step."""
    assert _simulate(tmp_path, trace, 60) == 2
    assert "a --step of 30 seconds plays it" in capsys.readouterr().err
    one_second = _seven(tmp_path / "one_second.csv", 29.2, 29.8)
    assert _simulate(tmp_path, one_second, 60) == 2
    err = capsys.readouterr().err
    assert f"{one_second}: field 'value': invalid value '1 observed steps'" in err, err
    assert "--step" not in err, err


def test_a_requests_log_observed_in_one_own_step_is_refused_naming_a_step_that_plays_it(tmp_path, capsys):
    """A request every 2 s from START+0.5 to START+134.5: at its own 1 min step three steps, its first and last partly
    covered, one observed; at 61 s steps four (START is 53 past a multiple of 61), two observed: it plays."""
    trace = tmp_path / "requests.csv"
    trace.write_text("timestamp\n" + "".join(f"{START + 0.5 + 2 * k}\n" for k in range(68)))
    for step, named in ((60, 61), (3600, 62)):
        assert _simulate(tmp_path, trace, step, "requests") == 2
        err = capsys.readouterr().err
        assert f"field '--step': invalid value {float(step)!r}; allowed: a --step of {named} seconds plays it (" in err
        assert "a requests log's first and last steps, partly covered, are not observed" in err, err
        assert _simulate(tmp_path, trace, named, "requests") == 0, capsys.readouterr().err
