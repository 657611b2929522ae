"""A first cap's pending Set (written before it is asked, 2ee8c2f8) at the GPU's limit before is that cap, not a
give-back. An operator sets ``nvidia-smi -pl 250`` while gputide's first cap of 250 W is refused; the next sync
records {before_w: 250, pending_w: 250} and asks the Set (it changes nothing); the agent is killed before it writes
the outcome. The restarted agent took the pending Set at the limit before for a give-back (`_done`: an earlier
agent's Set at before_w), forgot the GPU, and a later give-back or deletion restored the default: 700 W over the
operator's 250 W (audit s34x11). That Set is no longer asked (h3, session 39): a first cap seen refused whose GPU
runs at its watts is in force, and the operator's (`PowerCapAgent._held_down`, its refusal kept in the state file), so
an agent restarted at any sync, before or after the give-back, leaves the operator's limit, the driver allowing Sets
by then. A state file an older agent wrote, killed as that Set returned, is still read after an upgrade: its pending
Set at the limit before is the first cap, landed (`_done` gives back only a GPU gputide had capped, set_w known), so
the give-back or deletion leaves the operator's 250 W (audit a5 of 868252b3)."""

from __future__ import annotations

import json

import pytest

from exporters.power_caps import PowerCapAgent, Restore
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_late_set import SET, node
from tests.exporters.test_exporter_power_cap_refused_first_operator_at_cap import refused_first_cap


class Asks:
    """The backend, counting what the agent asks of it (a Set at the limit in force costs the driver no call)."""

    def __init__(self, backend) -> None:
        self.backend, self.asked = backend, []

    def power_limits(self):
        return self.backend.power_limits()

    def apply_power_caps(self, caps):
        self.asked.append(dict(caps))
        return self.backend.apply_power_caps(caps)


@pytest.mark.parametrize("given_back", ["restore", "deleted"])
def test_the_operators_limit_at_the_caps_watts_is_never_raised_after_a_restart(tmp_path, given_back):
    devs, backend, source, _, state = refused_first_cap(tmp_path, False)
    devs[1].fail = {}   # the driver allows Sets from now on: one raising the limit would land
    devs[1].limit_mw = 250_000   # the operator's nvidia-smi -pl 250, while gputide's cap is refused
    target, sets = Asks(backend), backend.nvml.calls.count(SET)
    for step in ("still asked", "still asked", "given back", "given back"):
        if step == "given back":
            source.caps = {"GPU-1": Restore(250.0)} if given_back == "restore" else {}
        agent = PowerCapAgent(source, target, LimitsBefore(state))   # restarted before each sync
        agent.sync()
        assert devs[1].limit_mw == 250_000, step
        assert agent.failed is None, step
    assert target.asked == [] and backend.nvml.calls.count(SET) == sets   # in force, the operator's: nothing asked


@pytest.mark.parametrize("given_back", ["restore", "deleted"])
def test_an_older_agents_pending_first_cap_at_the_limit_before_is_never_given_back_after_an_upgrade(tmp_path,
                                                                                                     given_back):
    """Written by an agent before 868252b3, which asked that Set and was killed as it returned."""
    devs, _, backend, source, _, state = node(tmp_path, {"GPU-1": 250.0})
    devs[1].limit_mw = 250_000   # the operator's nvidia-smi -pl 250 (default 700 W), gputide's cap 250 W
    state.write_text(json.dumps({"GPU-1": {"before_w": 250.0, "pending_w": 250.0}}))
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # the new agent, started on it
    agent.sync()
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 250.0, "set_w": 250.0}}   # the cap, landed
    source.caps = {"GPU-1": Restore(250.0)} if given_back == "restore" else {}
    agent.sync()
    agent.sync()
    assert devs[1].limit_mw == 250_000   # was 700 W: the pending Set taken for a give-back, the GPU forgotten
