"""The power-cap agent's `--interval` is checked once, by `_args.duration_between` (review s33h24): it caught
`loop_interval`'s refusal (a day's ceiling, no mention of the caps' expiry) only to raise its own, so every refusal
carried a second, misleading one as its cause. One check now, one message: the same allowed range the operator sees
(tests/cli/test_cli_input_floors.py pins its text)."""

from __future__ import annotations

import pytest

from balancer.cmd.power_cap_agent import agent_interval
from balancer.errors import InputError


@pytest.mark.parametrize("text", ["999ms", "301s", "1e308", "inf", "nan", "0", "-5s", "soon", ""])
def test_a_refused_interval_is_one_error_with_no_other_behind_it(text):
    with pytest.raises(InputError) as err:
        agent_interval(text)
    assert err.value.__cause__ is None and err.value.__context__ is None
    assert err.value.field == "--interval" and "from 1s to 300s (a third of the power caps'" in err.value.allowed


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("300s", 300.0), ("5m", 300.0), ("1000ms", 1.0)])
def test_the_bounds_themselves_are_allowed(text, seconds):
    assert agent_interval(text) == seconds
