"""A trace too long to load at a step (more than `MAX_STEPS` steps over its span) is refused naming the finest whole
--step that loads it, as a trace spanning under two steps is refused naming a --step that plays it (session 41).
Before, the refusal named only the step refused ('0 days 00:00:01') and the rule, not which --step to give."""

from __future__ import annotations

import re

import pytest

from balancer.cli import main
from balancer.errors import InputError
from balancer.forecast.traces import load_demand

START = 1704067200   # 2024-01-01T00:00:00Z
DAY = 86400


def _named(err: str) -> int:
    found = re.search(r"field 'step': invalid value '[^']+'; allowed: a --step of at least (\d+) seconds loads it "
                      r"\(a step giving at most 5000000 steps over the trace's span\)", err)
    assert found, err
    return int(found.group(1))


def _finest(path, named: int) -> None:
    """`named` loads the trace; one second finer does not."""
    assert len(load_demand(path, "csv", step=str(named))) > 1
    with pytest.raises(InputError) as finer:
        load_demand(path, "csv", step=str(named - 1))
    assert finer.value.field == "step"


def test_a_step_too_fine_for_the_trace_names_the_finest_that_loads(tmp_path):
    """The loader's refusal; `forecast backtest`, whose bounds ask more, names its own step
    (test_cli_backtest_too_long_names_its_step_s41.py)."""
    trace = tmp_path / "daily.csv"   # 69 days: 5,961,600 steps of 1s
    trace.write_text("timestamp,value\n" + "".join(f"{START + i * DAY},{5 + i % 3}\n" for i in range(70)))
    with pytest.raises(InputError) as refused:
        load_demand(trace, "csv", step="1s")
    assert str(refused.value).startswith(f"{trace}: field 'step': invalid value '0 days 00:00:01'"), refused.value
    assert _named(str(refused.value)) == 2
    _finest(trace, 2)


def test_simulate_at_a_step_too_fine_for_the_trace_names_the_finest_that_loads_and_it_plays(tmp_path, capsys):
    trace = tmp_path / "decade.csv"   # 20 rows 30 s apart, one ten years on: 315,360,570 s, 5,256,010 steps at 60 s
    rows = [(START + 30 * i, 10 + i % 4) for i in range(20)] + [(START + 3650 * DAY, 12)]
    trace.write_text("timestamp,value\n" + "".join(f"{t},{v}\n" for t, v in rows))

    def simulate(step):
        return main(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.02", "--no-plots",
                     "--out", str(tmp_path / f"out{step}"), "--trace", str(trace), "--step", str(step)])

    assert simulate(60) == 2
    err = capsys.readouterr().err   # worded as simulate's refusal of a trace too short for --step: '--step', 60.0
    found = re.search(rf"{re.escape(str(trace))}: field '--step': invalid value 60\.0; allowed: a --step of at least "
                      r"(\d+) seconds loads it \(at most 5000000 steps over the trace's span\)", err)
    assert found, err
    named = int(found.group(1))
    assert named == 64
    _finest(trace, named)
    assert simulate(named) == 0, capsys.readouterr().err
