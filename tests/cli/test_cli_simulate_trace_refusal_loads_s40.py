"""`simulate --trace` refusals read the trace no more often than they need (review of session 40). Since 31ff8771
every 'rows' or 'value' refusal at --step was sent to the search for a --step that plays the trace, which read the
file again at its own step and refused it alike: a csv with `abc` on its last row was parsed twice, a requests log
spanning 134 s at --step 30 three times (a 2M-row one: about 10 s). Now only the loader's refusal of a trace under
two steps is (`TooFewSteps`), one loaded at its own step is not read again for it, and no 1s load is made where no
coarser whole --step can play it (its own step 1s, or an hour). Messages are those of before. A trace whose observed
values are all 0 is not told that a --step plays it: at that --step it was refused as 'no positive demand'."""

from __future__ import annotations

import pytest

from balancer.app import scenarios
from balancer.errors import InputError
from balancer.forecast import traces

START = 1704067200   # 2024-01-01T00:00:00Z
ONE_OBSERVED = ("field 'value': invalid value '1 observed steps'; allowed: a trace with demand observed (not empty) "
                "in at least two steps")


def _series(step: int, rows: int, observed: int) -> str:
    return "timestamp,value\n" + "".join(f"{START + step * i},{'5' if i == observed else ''}\n" for i in range(rows))


@pytest.mark.parametrize("text, fmt, step_s, loads, message", [
    pytest.param("timestamp,value\n" + "".join(f"{START + 60 * i},{i + 1}\n" for i in range(100))
                 + f"{START + 6000},abc\n", "csv", 60.0, 1,
                 "field 'value': invalid value 'abc'; allowed: a number from 0 to 1e+09 (req/s; empty: not "
                 "observed) (row 102)", id="a bad value: the load refusing it only (was 2)"),
    pytest.param("timestamp\n" + "".join(f"{START + 30 + i}\n" for i in range(0, 134, 2)), "requests", 30.0, 2,
                 ONE_OBSERVED + " (a requests log's first and last steps, partly covered, are not observed)",
                 id="a requests log under two observed minutes at --step 30: that load and one at 1s (was 3)"),
    pytest.param(_series(1, 10, 3), "csv", 60.0, 2, ONE_OBSERVED,
                 id="own step 1s, one observed: at --step and at its own, no 1s load (was 3)"),
    pytest.param(_series(3600, 10, 3), "csv", 60.0, 1, ONE_OBSERVED,
                 id="own step an hour, one observed: loaded at its own, no other load (was 3)"),
])
def test_a_refused_trace_is_read_only_as_often_as_its_refusal_needs(tmp_path, monkeypatch, text, fmt, step_s, loads,
                                                                     message):
    trace = tmp_path / "trace.csv"
    trace.write_text(text)
    calls = []
    load_demand = traces.load_demand
    monkeypatch.setattr(traces, "load_demand", lambda *a, **k: calls.append(a) or load_demand(*a, **k))
    with pytest.raises(InputError) as exc:
        scenarios.load_trace_shape(str(trace), fmt, step_s)
    assert str(exc.value) == f"{trace}: {message}"
    assert len(calls) == loads


@pytest.mark.parametrize("step_s", [60.0, 30.0])
def test_a_trace_observed_only_as_zero_is_not_told_a_step_plays_it(tmp_path, step_s):
    # a 7 s trace observed at 29 and 31 s past a step's start: at --step 30 its two values fall in two steps, but
    # both are 0; named at --step 60 before ('a --step of 30 seconds plays it'), refused at 30 as no positive demand
    trace = tmp_path / "zero.csv"
    rows = [(START + 7 * i, "") for i in range(5)] + [(START + 29, "0"), (START + 31, "0")]
    rows += [(START + 35 + 7 * i, "") for i in range(5)]
    trace.write_text("timestamp,value\n" + "".join(f"{t},{v}\n" for t, v in sorted(rows)))
    with pytest.raises(InputError) as exc:
        scenarios.load_trace_shape(str(trace), "csv", step_s)
    assert "--step of" not in str(exc.value)
    assert exc.value.field == "value"
