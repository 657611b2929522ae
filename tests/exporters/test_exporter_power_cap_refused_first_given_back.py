"""A first cap the driver refused, given back (a `Restore`) or expired while still refused, is carried out as it is:
none of its Sets landed, so the GPU's limit is left where it is, though an operator's ``nvidia-smi -pl`` set it at
the cap's watts meanwhile (audit of 7b97569f, finding 3).

The agent dropped the refused cap's limit before, then judged the give-back as any other: the GPU ran at the cap's
watts, so it was taken for gputide's cap and given back to the default, raising the operator's 250 W to 700 W once
the driver let it (`PowerCapAgent._not_capped_yet` now records the give-back as carried out).

The refusal stays written while the give-back does (audit s34x8 of ceaacb74, finding 1): dropped from the state file,
an agent restarted once the driver allowed Sets found the operator's 250 W under the give-back the controller keeps
(or the expired cap of a dead controller), took it for gputide's cap and raised it to 700 W."""

from __future__ import annotations

import json

import pytest

from exporters.power_caps import Expiring, PowerCapAgent, Restore
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_refused_first_operator_at_cap import refused_first_cap


@pytest.mark.parametrize("given_back", [Restore(250.0), Expiring(250.0, 0.0)], ids=["restore", "expired"])
def test_a_refused_first_cap_given_back_leaves_an_operators_limit_at_its_watts(tmp_path, given_back):
    devs, _, source, agent, state = refused_first_cap(tmp_path, False)
    devs[1].limit_mw = 250_000   # the operator: nvidia-smi -pl 250, while gputide's cap is refused
    agent.sync()
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 250.0, "refused": True}}
    source.caps = {"GPU-1": given_back}
    agent.sync()
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 250.0, "refused": True}}
    devs[1].fail = {}   # the driver lets the agent set limits now
    agent.sync()
    assert devs[1].limit_mw == 250_000   # the operator's, not the default 700 W
    assert agent.failed is None


@pytest.mark.parametrize("given_back", [Restore(250.0), Expiring(250.0, 0.0)], ids=["restore", "expired"])
def test_an_agent_restarted_under_the_give_back_of_a_refused_first_cap_leaves_the_operators_limit(tmp_path,
                                                                                                  given_back):
    devs, backend, source, agent, state = refused_first_cap(tmp_path, False)
    devs[1].limit_mw = 250_000   # the operator
    agent.sync()
    source.caps = {"GPU-1": given_back}   # kept by the controller: the GPU runs at its watts (or expired, kept)
    agent.sync()
    devs[1].fail = {}   # the driver lets the agent set limits now
    agent.sync()
    assert devs[1].limit_mw == 250_000
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted
    agent.sync()
    assert devs[1].limit_mw == 250_000   # the operator's (was: given back to the default 700 W)
    assert agent.failed is None
    source.caps = {}   # the give-back pruned at last: the refusal goes too
    agent.sync()
    assert devs[1].limit_mw == 250_000 and json.loads(state.read_text()) == {}
