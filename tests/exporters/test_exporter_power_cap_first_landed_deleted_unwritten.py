"""A first cap that landed under an agent stopped before it wrote so, its entry then deleted outright while no agent
ran, is given back to the limit found before it (an operator's 500 W) by the restarted agent.

The state file said only ``{"before_w": 500}`` when the Set landed (the watts asked were written once it had), so the
restarted agent found the GPU at 250 W with no cap of gputide's recorded: it dropped the limit before
(`_not_capped_yet`) and `_left_capped` needs a set limit, so the GPU stayed at 250 W for good, no sync failing. Now a
first Set's watts are written as pending with the limit before, before the Set is asked; the restarted agent judges
it as any pending Set (`_settle`): found at those watts, it is gputide's cap, given back to the limit before."""

from __future__ import annotations

import json

from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_late_set import node
from tests.exporters.test_exporter_power_cap_refused_first_operator_at_cap import refused_first_cap


class StopsAfterTheSet:
    """The backend, with the state file kept as it was the moment each Set landed (the agent killed then)."""

    def __init__(self, backend, state) -> None:
        self.backend, self.state, self.on_disk = backend, state, None

    def power_limits(self):
        return self.backend.power_limits()

    def apply_power_caps(self, caps):
        out = self.backend.apply_power_caps(caps)
        self.on_disk = self.state.read_text()
        return out


def test_a_landed_first_cap_deleted_while_no_agent_ran_is_given_back_to_the_limit_before(tmp_path):
    devs, _, backend, source, _, state = node(tmp_path, {})
    devs[1].limit_mw = 500_000   # the operator's, before gputide: nvidia-smi -pl 500
    target = StopsAfterTheSet(backend, state)
    agent = PowerCapAgent(source, target, LimitsBefore(state))
    agent.sync()
    source.caps = {"GPU-1": 250.0}
    assert agent.sync() == {"GPU-1": 250.0} and devs[1].limit_mw == 250_000
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 500.0, "set_w": 250.0}}   # as before, once done
    state.write_text(target.on_disk)   # the agent killed between the Set landing and its write
    source.caps = {}   # the entry deleted outright while no agent ran
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted
    agent.sync()
    assert devs[1].limit_mw == 500_000   # the limit before gputide (was: left at 250 W for good)
    assert agent.failed is None and json.loads(state.read_text()) == {}


def killed_as_it_lands(agent: PowerCapAgent, backend, source, state) -> PowerCapAgent:
    """`agent` killed as the Set its next sync asks lands; its cap's entry then deleted outright: restarted."""
    target = StopsAfterTheSet(backend, state)
    agent.target = target
    agent.sync()
    state.write_text(target.on_disk)
    source.caps = {}
    return PowerCapAgent(source, backend, LimitsBefore(state))


def test_a_first_cap_asked_again_by_a_restarted_agent_is_given_back_though_killed_as_it_lands(tmp_path):
    """Killed before its first Set landed (the GPU still at the limit before): the restarted agent settles the Set as
    not landed and asks it again (its record from the earlier agent: no new limit before); killed again as that Set
    lands, the entry deleted, the next agent gives the GPU back to the limit before."""
    devs, _, backend, source, _, state = node(tmp_path, {})
    devs[1].limit_mw = 500_000
    target = StopsAfterTheSet(backend, state)
    agent = PowerCapAgent(source, target, LimitsBefore(state))
    source.caps = {"GPU-1": 250.0}
    agent.sync()
    state.write_text(target.on_disk)
    devs[1].limit_mw = 500_000   # the Set never landed
    agent = killed_as_it_lands(PowerCapAgent(source, backend, LimitsBefore(state)), backend, source, state)
    assert devs[1].limit_mw == 250_000
    agent.sync()
    assert devs[1].limit_mw == 500_000   # was: left at 250 W for good
    assert agent.failed is None and json.loads(state.read_text()) == {}


def test_a_refused_first_cap_that_lands_is_given_back_though_killed_as_it_lands_and_its_entry_deleted(tmp_path):
    """A first cap the driver refused (written so), asked again once it may: the refusal is cleared and the watts
    written pending before the Set, so an agent killed as it lands leaves a file that says so."""
    devs, backend, source, agent, state = refused_first_cap(tmp_path, False)
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "refused": True}}   # none pending
    devs[1].fail = {}
    agent = killed_as_it_lands(agent, backend, source, state)
    assert devs[1].limit_mw == 250_000
    agent.sync()
    assert devs[1].limit_mw == 700_000   # was: left at 250 W for good
    assert agent.failed is None and json.loads(state.read_text()) == {}

