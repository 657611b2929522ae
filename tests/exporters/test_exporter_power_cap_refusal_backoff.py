"""A GPU whose power-limit Set the driver refuses for good (NVML's NoPermission: no CAP_SYS_ADMIN, or the board
forbids it; NotSupported) was asked again at every sync, forever: each sync an NVML call, a log line and, for a first
cap, two state-file writes (the refusal cleared before the Set, 91e1bea1, and written back after it, 0c02ca1f). Now it
is asked again at syncs 1, 2, 4, 8, ... after the first refusal (at most `REFUSAL_BACKOFF_MAX_S` apart), nothing
asked, written or logged in between, the sync failed at each; asked at once when its cap changes or is given back,
and no longer waiting once a Set lands. Fake NVML and an injected clock (10 s a sync, the default interval)."""

from __future__ import annotations

import json
import logging

import pytest

import exporters.power_limits_before as limits_before
from exporters.backends.fake_nvml import (
    FakeDevice,
    FakeNvml,
    NVMLError_GpuIsLost,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
)
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import REFUSAL_BACKOFF_MAX_S, PowerCapAgent, Restore
from exporters.power_limits_before import LimitsBefore

W = 1000   # milliwatts
SET = "nvmlDeviceSetPowerManagementLimit"
SYNC_S = 10.0


class Caps:
    def __init__(self, caps):
        self.caps = caps

    def read(self):
        return dict(self.caps)


class CountingNvml(FakeNvml):
    """Fake NVML that notes each Set asked (refused or not), with the state file as it reads at that moment."""

    def __init__(self, devices, state):
        super().__init__(devices)
        self.sets, self.state = [], state

    def nvmlDeviceSetPowerManagementLimit(self, h, mw):
        self.sets.append(json.loads(self.state.read_text()) if self.state.exists() else {})
        return super().nvmlDeviceSetPowerManagementLimit(h, mw)


class Node:
    def __init__(self, tmp_path, monkeypatch, refusal=NVMLError_NoPermission):
        self.gpu = FakeDevice(uuid="GPU-0", limit_mw=700 * W, default_limit_mw=700 * W)
        self.gpu.fail[SET] = refusal
        self.state = tmp_path / "before.json"
        self.nvml = CountingNvml([self.gpu], self.state)
        self.source = Caps({"GPU-0": 250.0})
        self.now = 1_000_000.0
        self.agent = PowerCapAgent(self.source, NvmlBackend(self.nvml), LimitsBefore(self.state),
                                   clock=lambda: self.now)
        self.writes = 0
        save = limits_before.LimitsBefore._save

        def counted(before):
            self.writes += 1
            save(before)

        monkeypatch.setattr(limits_before.LimitsBefore, "_save", counted)
        self.count = 0   # syncs so far
        self.failed = set()   # what the syncs `asked` made said

    def sync(self):
        """One sync, 10 s after the last; whether a Set was asked and how many writes it made."""
        self.count += 1
        self.now += SYNC_S
        sets, writes = len(self.nvml.sets), self.writes
        self.agent.sync()
        return len(self.nvml.sets) - sets, self.writes - writes

    def asked(self, syncs):
        """The syncs (numbered from 1) among the next `syncs` at which a Set was asked."""
        out = []
        for _ in range(syncs):
            asked, writes = self.sync()
            assert self.agent.failed and "GPU-0" in self.agent.failed   # not capped: a failed sync each time
            self.failed.add(self.agent.failed)
            assert writes == (2 if asked else 0), f"sync {self.count}: {writes} writes"
            if asked:
                out.append(self.count)
        return out


@pytest.mark.parametrize("refusal", [NVMLError_NoPermission, NVMLError_NotSupported])
def test_a_set_refused_for_good_is_asked_at_syncs_1_2_4_8_and_nothing_is_written_or_logged_between(
        tmp_path, monkeypatch, caplog, refusal):
    node = Node(tmp_path, monkeypatch, refusal)
    with caplog.at_level(logging.INFO, logger="exporters.power_caps"):
        assert node.asked(20) == [1, 2, 4, 8, 16]   # was every sync, 1 to 20
    assert len(node.failed) == 1   # the same words at every sync, waiting or refused again: logged once by the CLI
    assert [r.getMessage() for r in caplog.records if r.name == "exporters.power_caps"] == [
        f"the driver refuses the power-limit Set of GPU-0 ({refusal.__name__}: ): not set; asked again at the next "
        f"sync, then after twice as many syncs at each refusal, at most {REFUSAL_BACKOFF_MAX_S:.0f} s apart (logged "
        "again when it lands; the sync fails meanwhile)"]   # once, not at each of the 5 refusals
    assert node.gpu.limit_mw == 700 * W
    # both crash-safety writes still frame each Set: the refusal cleared (written pending) before it is asked, so a
    # Set that lands is never taken for a refused one by a restarted agent; written refused after it
    assert all(seen["GPU-0"] == {"before_w": 700.0, "pending_w": 250.0} for seen in node.nvml.sets[1:])
    assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 700.0, "refused": True}}


def test_the_wait_grows_to_ten_minutes_and_no_further(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    asked = node.asked(250)
    assert asked == [1, 2, 4, 8, 16, 32, 64, 124, 184, 244]   # 64 syncs (640 s) would pass 600 s: 60 syncs apart
    assert REFUSAL_BACKOFF_MAX_S == 600.0


def test_a_changed_cap_is_asked_at_once_and_its_wait_starts_over(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    assert node.asked(4) == [1, 2, 4]   # next at 8
    node.source.caps = {"GPU-0": 300.0}
    assert node.asked(4) == [5, 6, 8]   # was: waited until sync 8
    assert node.nvml.sets[-1]["GPU-0"]["pending_w"] == 300.0


def test_a_cap_given_back_and_asked_again_is_asked_at_once(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    assert node.asked(5) == [1, 2, 4]   # next at 8
    node.source.caps = {"GPU-0": Restore(250.0)}   # given back: carried out as it is, nothing asked
    node.sync()
    node.source.caps = {"GPU-0": 250.0}
    assert node.asked(2) == [7, 8]   # was: 8 only


def test_a_set_that_lands_at_last_waits_no_more_and_says_so_once(tmp_path, monkeypatch, caplog):
    node = Node(tmp_path, monkeypatch)
    assert node.asked(2) == [1, 2]   # next at 4
    del node.gpu.fail[SET]   # CAP_SYS_ADMIN granted without a restart, or the board allows it now
    assert node.sync() == (0, 0) and node.agent.failed   # sync 3: still waiting, still not capped
    caplog.clear()
    with caplog.at_level(logging.INFO, logger="exporters.power_caps"):
        assert node.sync()[0] == 1   # sync 4
        assert node.gpu.limit_mw == 250 * W and node.agent.failed is None
        assert node.sync() == (0, 0) and node.agent.failed is None
    assert [r.getMessage() for r in caplog.records if r.name == "exporters.power_caps"] == [
        "the power-limit Set of GPU-0 landed (250 W), the driver refusing it no more (was: NVMLError_NoPermission: )"]
    assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 700.0, "set_w": 250.0}}
    # refused again later (a changed cap): its wait starts from one sync, not from where it had got to
    node.gpu.fail[SET] = NVMLError_NoPermission
    node.source.caps = {"GPU-0": 200.0}
    assert [n for n in range(3) if node.sync()[0]] == [0, 1]


def test_a_refusal_not_for_good_is_asked_again_at_every_sync_and_ends_the_wait(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    assert node.asked(2) == [1, 2]   # next at 4
    node.gpu.fail[SET] = NVMLError_GpuIsLost   # may pass: asked at every sync, as any refused Set
    assert node.asked(4) == [4, 5, 6]


def test_a_refusal_whose_write_failed_is_written_at_the_next_sync_though_the_gpu_waits(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    node.sync()   # refused: asked again at sync 2
    replace, calls = limits_before.os.replace, []

    def second_fails(src, dst):
        calls.append(1)
        if len(calls) == 2:
            raise OSError("No space left on device")
        replace(src, dst)

    monkeypatch.setattr(limits_before.os, "replace", second_fails)
    node.sync()   # sync 2: cleared (written pending), asked, refused: that write fails
    assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 700.0, "pending_w": 250.0}}
    assert node.sync() == (0, 1)   # sync 3 waits, and writes the refusal all the same (`LimitsBefore.flush`)
    assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 700.0, "refused": True}}
    assert node.sync() == (1, 2)   # sync 4 asks
