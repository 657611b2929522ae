"""`load_demand(coarsen_to=...)` with a `coarsen_to` no --step can be (under 1s or NaN: a `SimCluster` step
from the API) refuses a trace too long at its own step naming that step (audit a3 of c6950c29). Before, `_regular`
parsed `coarsen_to` for the refusal and replaced it with "'0.5': a duration of at least 1s", a refusal of a step the
trace was never loaded at. MAX_STEPS is lowered so that 2 h at 1s stands for a trace too long."""

from __future__ import annotations

import math

import pytest

from balancer.errors import InputError
from balancer.forecast import traces
from balancer.forecast.traces import TooLong, load_demand

START = 1704067200   # 2024-01-01T00:00:00Z


@pytest.mark.parametrize("coarsen_to", [0.5, math.nan, -1.0])
def test_a_coarsen_to_no_step_can_be_leaves_the_too_long_refusal_naming_the_trace_s_own_step(tmp_path, monkeypatch,
                                                                                            coarsen_to):
    monkeypatch.setattr(traces, "MAX_STEPS", 1000)
    trace = tmp_path / "long.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{START + i},{1 + i % 3}\n" for i in range(7200)))
    with pytest.raises(InputError) as refused:
        load_demand(trace, "csv", coarsen_to=coarsen_to)
    assert isinstance(refused.value, TooLong), refused.value
    assert str(refused.value).startswith(f"{trace}: field 'step': invalid value '0 days 00:00:01'; allowed: a --step "
                                         "of at least 8 seconds loads it"), refused.value

