"""A first cap that landed under an agent stopped before it wrote so, given back (a `Restore`, or its expiry) while
no agent ran, is given back to the limit found before it (an operator's 500 W), not to the default.

The restarted agent dropped the limit before of a GPU whose first cap it did not know landed, then judged the
give-back as any other: the GPU ran at the cap, so it was given back, but with no limit before left it restored the
default (700 W over the operator's 500 W). Now a GPU found at its first cap, never seen refused, is written down as
gputide's cap (`PowerCapAgent._landed`) and its give-back puts the limit before back. Nor is the limit before dropped
when the restarted agent's first read of the GPU's limit fails (NaN): it was, and the give-back restored 700 W once
the limit read (audit s34x8 of 9896a79e, finding 2); the GPU is left alone until its limit reads."""

from __future__ import annotations

import json
import math

import pytest

from exporters.power_caps import Expiring, PowerCapAgent, Restore
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_late_set import node


@pytest.mark.parametrize("given_back", [Restore(250.0), Expiring(250.0, 0.0)], ids=["restore", "expired"])
def test_a_landed_first_cap_given_back_while_no_agent_ran_restores_the_limit_before(tmp_path, given_back):
    devs, _, backend, source, agent, state = node(tmp_path, {})
    devs[1].limit_mw = 500_000   # the operator's, before gputide: nvidia-smi -pl 500
    agent.sync()
    source.caps = {"GPU-1": 250.0}
    agent.sync()
    assert devs[1].limit_mw == 250_000
    state.write_text(json.dumps({"GPU-1": {"before_w": 500.0}}))   # the agent stopped before it wrote the Set down
    source.caps = {"GPU-1": given_back}   # given back while no agent ran
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted
    agent.sync()
    assert devs[1].limit_mw == 500_000   # the limit before gputide (was: the default 700 W)
    assert json.loads(state.read_text()) == {}


@pytest.mark.parametrize("given_back", [Restore(250.0), Expiring(250.0, 0.0)], ids=["restore", "expired"])
def test_a_landed_first_cap_given_back_while_no_agent_ran_waits_for_an_unread_limit(tmp_path, monkeypatch,
                                                                                     given_back):
    devs, _, backend, source, agent, state = node(tmp_path, {})
    devs[1].limit_mw = 500_000
    agent.sync()
    source.caps = {"GPU-1": 250.0}
    agent.sync()
    state.write_text(json.dumps({"GPU-1": {"before_w": 500.0}}))   # the agent stopped before it wrote the Set down
    source.caps = {"GPU-1": given_back}
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted
    read = backend.power_limits
    monkeypatch.setattr(backend, "power_limits", lambda: {
        uuid: limit._replace(current_w=math.nan) if uuid == "GPU-1" else limit for uuid, limit in read().items()})
    agent.sync()   # GPU-1's limit unread
    assert devs[1].limit_mw == 250_000 and "GPU-1" in agent.failed
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 500.0}}   # was: {}, the limit before dropped
    monkeypatch.undo()
    agent.sync()
    assert devs[1].limit_mw == 500_000   # the limit before gputide (was: the default 700 W)
    assert json.loads(state.read_text()) == {}
