"""A refused first cap that lands later is never taken for a refused one by a restarted agent, though the agent stop
between the Set landing and writing it down, or that write fail (audit of 7b97569f, finding 1).

The refusal (``"refused": true`` in the state file) was cleared only once the Set had landed, in the same write
that says what gputide set. An agent killed before that write, or whose write failed (and the next sync wrote
nothing: the memory already held the entry), left the file saying refused while the GPU ran at gputide's 250 W; the
restarted agent took that for an operator's ``nvidia-smi -pl 250`` and its give-back left the GPU at 250 W for good,
not the 700 W found before. Now the refusal is cleared (written) before the cap is asked again
(`PowerCapAgent._unrefuse`); a GPU whose refusal cannot be cleared (the write fails) is not asked that sync (audit
s34x8, finding 4: it was asked, and a Set that landed left the file saying refused)."""

from __future__ import annotations

import json
import shutil

import exporters.power_limits_before as limits_before
from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_refused_first_operator_at_cap import refused_first_cap


def test_a_first_cap_that_lands_after_a_refusal_is_given_back_by_an_agent_killed_before_it_wrote_so(tmp_path,
                                                                                                 monkeypatch):
    devs, backend, source, agent, state = refused_first_cap(tmp_path, False)
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "refused": True}}
    killed = tmp_path / "killed.json"
    set_caps = backend.apply_power_caps

    def set_then_killed(caps):
        out = set_caps(caps)
        shutil.copy(state, killed)   # the file the agent leaves if it is killed as the Set returns
        return out

    monkeypatch.setattr(backend, "apply_power_caps", set_then_killed)
    devs[1].fail = {}   # privileged now: gputide's 250 W lands
    agent.sync()
    assert devs[1].limit_mw == 250_000
    # was: "refused": true; pending since the first Set's watts are written before it is asked
    assert json.loads(killed.read_text()) == {"GPU-1": {"before_w": 700.0, "pending_w": 250.0}}
    monkeypatch.undo()
    shutil.copy(killed, state)
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted
    agent.sync()
    assert agent.before.get("GPU-1").before_w == 700.0   # gputide's own cap, not an operator's
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 700_000   # given back (was: left at 250 W)


def test_a_refused_first_cap_is_not_asked_again_while_its_refusal_cannot_be_cleared_on_disk(
        tmp_path, monkeypatch):
    devs, backend, source, agent, state = refused_first_cap(tmp_path, False)

    def full(src, dst):
        raise OSError("No space left on device")

    monkeypatch.setattr(limits_before.os, "replace", full)
    devs[1].fail = {}
    agent.sync()
    assert "could not be written" in agent.failed
    assert devs[1].limit_mw == 700_000   # not asked: its refusal could not be cleared (was: set, still "refused")
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "refused": True}}
    assert agent.before.get("GPU-1").refused   # in memory as on disk
    monkeypatch.undo()
    agent.sync()   # cleared, then asked: it lands
    assert agent.failed is None and devs[1].limit_mw == 250_000
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "set_w": 250.0}}
    agent = PowerCapAgent(source, backend, LimitsBefore(state))   # restarted
    agent.sync()
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 700_000   # given back (was: left at 250 W)
