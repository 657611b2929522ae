"""A first cap's pending Set (written before it is asked, 2ee8c2f8) at the GPU's limit before is that cap, not a
give-back. An operator sets ``nvidia-smi -pl 250`` while gputide's first cap of 250 W is refused; the next sync
records {before_w: 250, pending_w: 250} and asks the Set (it changes nothing); the agent is killed before it writes
the outcome. The restarted agent took the pending Set at the limit before for a give-back (`_done`: an earlier
agent's Set at before_w), forgot the GPU, and a later give-back or deletion restored the default: 700 W over the
operator's 250 W (audit s34x11). That Set is no longer asked (h3, session 39): a first cap seen refused whose GPU
runs at its watts is in force, and the operator's (`PowerCapAgent._held_down`); the agent restarted there and the
give-back still leave the operator's limit."""

from __future__ import annotations

import pytest

from exporters.power_caps import PowerCapAgent, Restore
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_first_landed_deleted_unwritten import StopsAfterTheSet
from tests.exporters.test_exporter_power_cap_refused_first_operator_at_cap import refused_first_cap


@pytest.mark.parametrize("given_back", ["restore", "deleted"])
def test_the_operators_limit_at_the_caps_watts_is_never_raised_after_a_restart(tmp_path, given_back):
    devs, backend, source, agent, state = refused_first_cap(tmp_path, False)
    devs[1].fail = {}
    devs[1].limit_mw = 250_000   # the operator's nvidia-smi -pl 250, while gputide's cap is refused
    target = StopsAfterTheSet(backend, state)
    agent.target = target
    agent.sync()
    assert target.on_disk is None   # not asked: it would change nothing (was: asked, the agent killed as it returned)
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted all the same
    agent.sync()
    source.caps = {"GPU-1": Restore(250.0)} if given_back == "restore" else {}
    agent.sync()
    agent.sync()
    assert devs[1].limit_mw == 250_000
