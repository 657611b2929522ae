"""A first cap seen refused is kept in the state file (`Held.refused`, ``"refused": true``), so an agent restarted
after the refusal (an upgrade, the liveness probe) takes an operator's ``nvidia-smi -pl`` at the cap's watts for the
operator's, as the agent that saw the refusal does (`PowerCapAgent._not_capped_yet`). The refusal was kept in memory
only: the restarted agent took that limit for its own cap, set before it could write so, and its give-back raised
the operator's 250 W to the 700 W found before. A state file without the key (an older agent's) loads as no refusal
(test_exporter_power_cap_refused_first)."""

from __future__ import annotations

import json

import pytest

from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_refused_first_operator_at_cap import refused_first_cap


@pytest.mark.parametrize("late", [False, True])
def test_an_agent_restarted_after_the_refusal_gives_the_operators_limit_at_the_caps_watts_back_to_itself(tmp_path,
                                                                                                          late):
    devs, backend, source, agent, state = refused_first_cap(tmp_path, late)
    if late:
        agent.sync()   # judged refused from what it returned (the Set asked again, refused again)
    devs[1].fail = {}
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "refused": True}}
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted
    devs[1].limit_mw = 250_000   # the operator: nvidia-smi -pl 250
    agent.sync()
    assert agent.before.get("GPU-1").before_w == 250.0   # the operator's (was 700 W: taken for gputide's own cap)
    # in force by the operator's limit: not asked (a Set at the limit in force is none), still the operator's
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 250.0, "refused": True}}
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 250_000   # the operator's, not the 700 W found before the refused cap
    assert json.loads(state.read_text()) == {}

