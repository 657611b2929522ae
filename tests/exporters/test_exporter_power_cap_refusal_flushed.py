"""A first cap's refusal that `_apply` could not write is written at the very next sync, even one whose source is
unreadable. `_unrefuse` writes the GPU "not refused" before its Set; the driver refuses it and the write marking it
refused again fails (kept in memory, `LimitsBefore.flush`). The next sync flushed only after reading the source, so
while the source was unreadable the file kept saying "not refused", and an agent restarted then took an operator's
``nvidia-smi -pl`` at the cap's watts for gputide's cap (`PowerCapAgent._landed`). Also: the one test of "the GPU runs
at the cap" (`runs_at`) that `_landed`, `_held_down`, `_settle` and `holds` share."""

from __future__ import annotations

import json
import math

import exporters.power_limits_before as limits_before
from exporters.backends.fake_nvml import NVMLError_NoPermission
from exporters.power_caps import TOLERANCE_W, PowerLimit, holds, runs_at
from tests.exporters.test_exporter_power_cap_late_set import SET, node


def test_runs_at_is_the_cap_as_clamped_within_the_tolerance_and_never_on_an_unread_limit():
    assert runs_at(PowerLimit(300.0 + TOLERANCE_W, 700.0, 100.0), 300.0)
    assert not runs_at(PowerLimit(300.0 + 2 * TOLERANCE_W, 700.0, 100.0), 300.0)
    assert runs_at(PowerLimit(700.0, 700.0, 100.0), 900.0)     # clamped to the default
    assert runs_at(PowerLimit(100.0, 700.0, 100.0), 50.0)      # clamped to the minimum
    assert not runs_at(PowerLimit(math.nan, 700.0, 100.0), 300.0)
    assert not holds(PowerLimit(700.0, 700.0, 100.0), 900.0)   # at the default: nothing of gputide's to give back


def test_a_refusal_whose_write_failed_is_written_next_sync_though_the_source_is_unreadable(tmp_path, monkeypatch):
    devs, _, _, source, agent, state = node(tmp_path, {})
    agent.sync()
    source.caps = {"GPU-0": 250.0}
    devs[0].fail = {SET: NVMLError_NoPermission}
    agent.sync()
    assert json.loads(state.read_text()) == {"GPU-0": {"before_w": 700.0, "refused": True}}
    save, calls = limits_before.LimitsBefore._save, []

    def second_write_fails(self):   # `_unrefuse`'s clear is written, `_apply`'s refusal is not
        calls.append(1)
        if len(calls) == 2:
            self._unwritten = True
            raise OSError("disk full")
        save(self)

    monkeypatch.setattr(limits_before.LimitsBefore, "_save", second_write_fails)
    agent.sync()
    assert "disk full" in agent.failed
    # the window: "not refused" on disk (pending: a restarted agent finding 700 W settles it as not landed)
    assert json.loads(state.read_text()) == {"GPU-0": {"before_w": 700.0, "pending_w": 250.0}}
    source.read = lambda: None   # unreadable caps (the API server down)
    agent.sync()
    assert "unreadable" in agent.failed
    assert json.loads(state.read_text()) == {"GPU-0": {"before_w": 700.0, "refused": True}}


def test_a_flush_that_fails_fails_the_sync_though_the_source_or_the_limits_are_unreadable(tmp_path, monkeypatch):
    """The sync says the state file could not be written whatever else stops it: an unreadable source, or limits
    NVML cannot read (`TargetUnavailable`), where it said only that (a flush failing there was only logged)."""
    from exporters.power_caps import TargetUnavailable

    devs, _, _, source, agent, state = node(tmp_path, {})
    agent.sync()
    source.caps = {"GPU-0": 250.0}
    devs[0].fail = {SET: NVMLError_NoPermission}
    agent.sync()
    agent.before._unwritten = True   # as after a failed write: the next sync's flush writes again

    def full(self):
        raise OSError("disk full")

    monkeypatch.setattr(limits_before.LimitsBefore, "_save", full)
    source.read = lambda: None
    agent.sync()
    assert "unreadable" in agent.failed and "could not be written: disk full" in agent.failed
    source.read = lambda: {}

    def unavailable():
        raise TargetUnavailable("NVML not initialised")

    monkeypatch.setattr(agent, "_limits", unavailable)
    agent.sync()
    assert "no power limit read" in agent.failed and "could not be written: disk full" in agent.failed
