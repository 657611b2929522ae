"""How `gputide simulate --trace` (hotspot) meets a --step the trace cannot be loaded at (audit a11 of a92c48f7).

A trace spanning under two --steps is refused naming --step, its value and the largest --step that plays it. Before:
the loader's refusal of the reload at --step never named --step ('field 'rows': invalid value 1; allowed: a trace
spanning at least two steps' for a 30 s trace at --step 60, '1 observed steps' for a 2 h requests log at --step
3600), nothing saying what to change.

A trace refused at its own step for giving too many steps is loaded at --step alone. Before: a 59-day trace at 1 s
with --step 60 was refused with 'field 'step': invalid value '0 days 00:00:01'', a step the user never gave, where
loading it at --step works.
"""

from __future__ import annotations

import re

import pytest

from balancer.cli import main
from balancer.forecast import traces

START = 1704067200   # 2024-01-01T00:00:00Z, a whole hour


def _simulate(tmp_path, trace, step, fmt="csv"):
    return main(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.02", "--no-plots",
                 "--out", str(tmp_path / f"out{step}"), "--trace", str(trace), "--format", fmt, "--step", str(step)])


def _csv(path, seconds, every_s=1.0):
    path.write_text("timestamp,value\n" + "".join(f"{START + i * every_s:.1f},{10 + 4 * (i % 2)}\n"
                                                  for i in range(int(seconds / every_s))))
    return path


def _requests(path, seconds):
    path.write_text("timestamp\n" + "".join(f"{START + i}\n" for i in range(seconds)))
    return path


@pytest.mark.parametrize("make, fmt, step", [
    pytest.param(lambda p: _csv(p, 30), "csv", 60, id="a 30 s trace at 1 s, --step 60"),
    pytest.param(lambda p: _csv(p, 20, 0.5), "csv", 60, id="a 20 s trace at 0.5 s, --step 60"),
    pytest.param(lambda p: _requests(p, 7200), "requests", 3600, id="a 2 h requests log, --step 3600"),
])
def test_a_trace_spanning_under_two_steps_is_refused_naming_step_and_the_largest_that_plays_it(
        tmp_path, capsys, make, fmt, step):
    trace = make(tmp_path / "trace.csv")
    assert _simulate(tmp_path, trace, step, fmt) == 2
    err = capsys.readouterr().err
    assert f"{trace}: field '--step': invalid value {float(step)!r}; allowed: a --step of at most " in err, err
    largest = int(re.search(r"a --step of at most (\d+) seconds", err).group(1))
    assert 1 <= largest < step
    assert _simulate(tmp_path, trace, largest, fmt) == 0, capsys.readouterr().err


def test_a_trace_too_long_at_its_own_step_is_loaded_at_the_given_step(tmp_path, capsys, monkeypatch):
    """MAX_STEPS lowered so that 2 h at 1 s (7200 steps) stands for 59 days (5.1 million); at --step 60, 120 steps."""
    monkeypatch.setattr(traces, "MAX_STEPS", 1000)
    trace = _csv(tmp_path / "long.csv", 7200)
    assert _simulate(tmp_path, trace, 60) == 0, capsys.readouterr().err
    assert "error" not in capsys.readouterr().err
    assert _simulate(tmp_path, trace, 1) == 2   # at --step 1 too many steps still: refused
    assert (f"{trace}: field '--step': invalid value 1.0; allowed: a --step of at least 8 seconds loads it (at most "
            "1000 steps over the trace's span)") in capsys.readouterr().err


@pytest.mark.parametrize("seconds, every_s, largest", [
    pytest.param(30, 1.0, 28, id="a 29 s trace at 1 s: at most 28"),
    pytest.param(30, 2.0, 26, id="a 28 s trace at 2 s: at most 26"),
])
def test_a_csv_trace_is_refused_naming_its_span_less_its_own_step(tmp_path, capsys, seconds, every_s, largest):
    """Its first and last times are over its span less one own step apart: every --step up to that plays it. Half
    its span (14 s of a 29 s trace at 1 s) was named before, where 20 s and 28 s play it."""
    trace = _csv(tmp_path / "trace.csv", seconds, every_s)
    assert _simulate(tmp_path, trace, 60) == 2
    err = capsys.readouterr().err
    assert f"allowed: a --step of at most {largest} seconds plays it" in err, err
    assert _simulate(tmp_path, trace, largest) == 0, capsys.readouterr().err


@pytest.mark.parametrize("every_s, step", [
    pytest.param(1.0, 2, id="2 rows at 1 s, --step 2"),
    pytest.param(1.0, 60, id="2 rows at 1 s, --step 60"),
    pytest.param(3.0, 5, id="2 rows at 3 s, --step 5"),
])
def test_a_csv_trace_spanning_one_own_step_is_refused_naming_its_own_step(tmp_path, capsys, every_s, step):
    """Its span less its own step is 0: --step at its own step plays it. It was told it needed 'a trace spanning at
    least two --steps of at least 1s', though --step 1 plays a 2-row trace at 1 s."""
    trace = _csv(tmp_path / "trace.csv", 2 * every_s, every_s)
    assert _simulate(tmp_path, trace, step) == 2
    err = capsys.readouterr().err
    named = f"field '--step': invalid value {float(step)!r}; allowed: a --step of {every_s:g} seconds plays it"
    assert named in err, err
    assert _simulate(tmp_path, trace, every_s) == 0, capsys.readouterr().err


def test_a_one_step_trace_at_an_uneven_step_is_told_a_step_that_plays_it(tmp_path, capsys):
    """Its own step of 12.345678 s was printed with 6 digits, 12.3457: above its own step, so the named --step
    reloaded it into one step and was refused with the same message (audit a15). Named rounded down, it plays."""
    trace = tmp_path / "trace.csv"
    trace.write_text(f"timestamp,value\n{START}.000000,10\n{START + 12}.345678,14\n")
    assert _simulate(tmp_path, trace, 60) == 2
    err = capsys.readouterr().err
    named = re.search(r"a --step of ([0-9.]+) seconds plays it", err)
    assert named and float(named.group(1)) <= 12.345678, err
    assert _simulate(tmp_path, trace, named.group(1)) == 0, capsys.readouterr().err
