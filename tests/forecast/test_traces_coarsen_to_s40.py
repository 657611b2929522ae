"""`load_demand(..., coarsen_to=s)` loads a trace at its own step, or at `s` where its own is finer (or under 1s), in
one parse, giving what the simulator once had from two: the trace at its own step and, finer than `s`, again at `s`
(session 40, item 1). Before, `simulate --trace` parsed a trace finer than --step twice (about 10 s more on a
5M-row requests log)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from balancer.app import scenarios
from balancer.errors import InputError
from balancer.forecast.traces import OwnStepTooFine, load_demand

START = 1704067200   # 2024-01-01T00:00:00Z


def _two_loads(path, fmt, step_s):
    """What `scenarios.load_trace_shape` loaded before coarsen_to: the trace at its own step, then at `step_s`
    where that was refused (under 1s, too many steps) or finer."""
    try:
        y = load_demand(path, fmt)
    except InputError as exc:
        if not (isinstance(exc, OwnStepTooFine) or exc.field == "step"):
            raise
        y = None
    if y is None or float(y.index[1].timestamp() - y.index[0].timestamp()) < step_s:
        y = load_demand(path, fmt, step=repr(float(step_s)))
    return y


def _csv(path, every_s, rows=7200, gaps=False):
    """`rows` rows `every_s` apart, values varying within each minute; with `gaps`, every 7th value empty."""
    lines = [f"{START + i * every_s:.3f},{'' if gaps and i % 7 == 3 else 10 + (i % 13) + 3 * (i // 97)}"
             for i in range(rows)]
    path.write_text("timestamp,value\n" + "\n".join(lines) + "\n")
    return path


def _servegen(folder, window_s, windows=2400):
    folder.mkdir()
    for k in range(2):
        (folder / f"client{k}.csv").write_text("".join(f"{i * window_s},{1 + k + (i * (k + 3)) % 11},1,gamma,1,1\n"
                                                       for i in range(windows)))
    return folder


def _requests(path, seconds=7200, seed=3):
    """A log of uneven arrivals (a Poisson process at 2 req/s), written out of order."""
    rng = np.random.default_rng(seed)
    times = START + 0.25 + np.cumsum(rng.exponential(0.5, size=2 * seconds))
    times = times[times < START + seconds]
    rng.shuffle(times)
    path.write_text("timestamp,latency_ms\n" + "".join(f"{t:.6f},{i % 50}\n" for i, t in enumerate(times)))
    return path


CASES = [
    pytest.param(lambda p: _csv(p / "t.csv", 0.5), "csv", 60.0, id="csv at 0.5 s (own step refused), step 60"),
    pytest.param(lambda p: _csv(p / "t.csv", 1, gaps=True), "csv", 60.0, id="csv at 1 s with gaps, step 60"),
    pytest.param(lambda p: _csv(p / "t.csv", 7, gaps=True), "csv", 45.0, id="csv at 7 s, step 45 (off its grid)"),
    pytest.param(lambda p: _csv(p / "t.csv", 120, rows=500), "csv", 60.0, id="csv at 120 s, step 60: its own"),
    pytest.param(lambda p: _csv(p / "t.csv", 60, rows=500), "csv", 60.0, id="csv at 60 s, step 60: its own"),
    pytest.param(lambda p: _servegen(p / "sg", 0.5), "servegen", 30.0, id="servegen at 0.5 s, step 30"),
    pytest.param(lambda p: _servegen(p / "sg", 10), "servegen", 60.0, id="servegen at 10 s, step 60"),
    pytest.param(lambda p: _servegen(p / "sg", 120, 300), "servegen", 60.0, id="servegen at 120 s, step 60: its own"),
    pytest.param(lambda p: _requests(p / "r.csv"), "requests", 120.0, id="requests, step 120"),
    pytest.param(lambda p: _requests(p / "r.csv"), "requests", 90.0, id="requests, step 90 (off the minute)"),
    pytest.param(lambda p: _requests(p / "r.csv"), "requests", 30.0, id="requests, step 30: its minute"),
]


@pytest.mark.parametrize("make, fmt, step_s", CASES)
def test_one_parse_with_coarsen_to_gives_what_the_two_loads_gave(tmp_path, make, fmt, step_s):
    path = make(tmp_path)
    once, twice = load_demand(path, fmt, coarsen_to=step_s), _two_loads(path, fmt, step_s)
    pd.testing.assert_series_equal(once, twice)
    assert once.index.freq == twice.index.freq and once.attrs == twice.attrs
    assert scenarios.load_trace_shape(str(path), fmt, step_s).step_s == pytest.approx(
        float(twice.index[1].timestamp() - twice.index[0].timestamp()))


@pytest.mark.parametrize("make, fmt, step_s", CASES)
def test_a_trace_is_read_once(tmp_path, monkeypatch, make, fmt, step_s):
    path = make(tmp_path)
    files = sorted(path.iterdir()) if path.is_dir() else [path]
    reads = []
    read_csv = pd.read_csv
    monkeypatch.setattr(pd, "read_csv", lambda f, *a, **k: reads.append(str(f)) or read_csv(f, *a, **k))
    scenarios.load_trace_shape(str(path), fmt, step_s)
    assert sorted(reads) == [str(f) for f in files]


def test_too_many_steps_at_its_own_step_are_refused_naming_the_step_asked_for(tmp_path):
    """Own step 600 s over 96 years (over 5M steps), step 60: the refusal names --step 60, the step the simulator's
    user gave, not the trace's own 600 s; the loader names the step it loaded at (600 s), the same least step."""
    path = tmp_path / "t.csv"
    path.write_text("timestamp,value\n" + "".join(f"{t},1\n" for t in (0, 600, 1200, 96 * 365 * 86400)))
    with pytest.raises(InputError) as one:
        load_demand(path, "csv", coarsen_to=60.0)
    assert "0 days 00:10:00" in str(one.value)
    with pytest.raises(InputError) as shape:
        scenarios.load_trace_shape(str(path), "csv", 60.0)
    assert str(shape.value).startswith(f"{path}: field '--step': invalid value 60.0; allowed: a --step of at least "
                                       f"{one.value.least_s} seconds loads it"), shape.value


def test_step_and_coarsen_to_together_are_a_programming_error(tmp_path):
    path = _csv(tmp_path / "t.csv", 60, rows=10)
    with pytest.raises(TypeError, match="step or coarsen_to"):
        load_demand(path, "csv", step="60", coarsen_to=60.0)
