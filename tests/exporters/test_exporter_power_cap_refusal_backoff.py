"""A GPU whose power-limit Set the driver refuses for good (NVML's NoPermission: no CAP_SYS_ADMIN, or the board
forbids it; NotSupported) was asked again at every sync, forever: each sync an NVML call, a log line and, for a first
cap, two state-file writes (the refusal cleared before the Set, 91e1bea1, and written back after it, 0c02ca1f). Now it
is asked again at syncs 1, 2, 4, 8, ... after the first refusal (at most `REFUSAL_BACKOFF_MAX_S` apart), nothing
asked, written or logged in between, the sync failed at each; asked at once when it is asked for another kind of
thing (given back, deleted, capped again), not when its cap's watts change (audit a16: a hot GPU's throttle moves
them every 2 minutes), and no longer waiting once a Set lands, once what it waited for is settled another way or the
GPU is gone from the node (audit a16: failed for good). Fake NVML and an injected clock (10 s a sync, the default
interval)."""

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
    NVMLError_Timeout,
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


def test_a_cap_whose_watts_change_at_every_sync_keeps_its_wait_and_lands_at_the_latest_watts(
        tmp_path, monkeypatch, caplog):
    """The controller's hotspot throttle proposes new watts for a GPU that stays hot (every ``powerCooldownS``,
    2 minutes): each new figure reset the wait (was: never past 2 minutes, 8 Sets in 24 syncs, the ERROR logged at
    each)."""
    node = Node(tmp_path, monkeypatch)

    def asked(syncs):
        out = []
        for _ in range(syncs):
            node.source.caps = {"GPU-0": 250.0 + node.count + 1}   # new watts at every sync
            asked, _ = node.sync()
            if asked:
                out.append(node.count)
                assert node.nvml.sets[-1]["GPU-0"]["pending_w"] == 250.0 + node.count   # the watts asked then
            node.failed.add(node.agent.failed)
        return out

    with caplog.at_level(logging.ERROR, logger="exporters.power_caps"):
        assert asked(16) == [1, 2, 4, 8, 16]   # was every sync, 1 to 16
    assert len(node.failed) == 1 and "GPU-0 (NVMLError_NoPermission" in node.failed.pop()   # the same words
    assert len([r for r in caplog.records if r.name == "exporters.power_caps"]) == 1   # logged once, not at each
    del node.gpu.fail[SET]   # the driver allows it at last: the next Set asked lands, at the watts asked then
    assert asked(16) == [32]
    assert node.gpu.limit_mw == 282 * W and node.agent.failed is None


def test_a_cap_given_back_and_asked_again_is_asked_at_once(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    assert node.asked(5) == [1, 2, 4]   # next at 8
    node.source.caps = {"GPU-0": Restore(250.0)}   # given back: carried out as it is, nothing asked
    node.sync()
    node.source.caps = {"GPU-0": 250.0}
    assert node.asked(2) == [7, 8]   # was: 8 only


def capped_then_refused(tmp_path, monkeypatch):
    """A node whose GPU-0 runs at gputide's 250 W cap (sync 1), its new cap of 200 W refused at syncs 2 and 3: asked
    next at sync 5."""
    node = Node(tmp_path, monkeypatch)
    del node.gpu.fail[SET]
    node.sync()
    assert node.gpu.limit_mw == 250 * W
    node.gpu.fail[SET], node.source.caps = NVMLError_NoPermission, {"GPU-0": 200.0}
    assert [node.sync()[0] for _ in range(2)] == [1, 1]
    return node


def test_a_cap_deleted_while_its_new_watts_wait_is_given_back_at_once(tmp_path, monkeypatch):
    """Another kind of request (here a give-back, the entry deleted) ends the wait where new watts do not."""
    node = capped_then_refused(tmp_path, monkeypatch)
    node.source.caps = {}   # released: given back to the limit before
    assert node.sync()[0] == 1   # sync 4: asked at once
    del node.gpu.fail[SET]
    assert node.sync()[0] == 1   # sync 5: its wait started over (one sync), and it lands
    assert node.gpu.limit_mw == 700 * W and node.agent.failed is None


def test_a_limit_changed_by_hand_while_a_cap_waits_asks_it_at_once(tmp_path, monkeypatch):
    """Something outside the agent changed the GPU (here raised above gputide's cap: lost, capped again)."""
    node = capped_then_refused(tmp_path, monkeypatch)
    node.gpu.limit_mw = 300 * W   # nvidia-smi -pl 300
    assert node.sync()[0] == 1 and node.agent.lost == {"GPU-0"}   # sync 4: asked at once (was: at 5)


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
    assert "GpuIsLost" in node.agent.failed and "NoPermission" not in node.agent.failed   # its wait ended


@pytest.mark.parametrize("give_back", [{"GPU-0": Restore(250.0)}, {}], ids=["restore", "deleted"])
def test_a_give_back_settled_another_way_while_it_waits_fails_no_more(tmp_path, monkeypatch, give_back):
    """A give-back whose Set is refused, then the GPU reset (or set to its default by hand): nothing is left to give
    back, nothing is asked (the GPU forgotten), and the sync fails no more (was: failed for good, saying the driver
    refuses the Set of GPU-0: GputidePowerCapAgentFailing firing for a GPU with nothing to do)."""
    node = Node(tmp_path, monkeypatch)
    del node.gpu.fail[SET]
    node.sync()
    assert node.gpu.limit_mw == 250 * W and node.agent.failed is None
    node.gpu.fail[SET], node.source.caps = NVMLError_NotSupported, give_back
    assert node.sync()[0] == 1 and "GPU-0 (NVMLError_NotSupported" in node.agent.failed   # waiting
    node.gpu.limit_mw = 700 * W   # a GPU reset, or nvidia-smi -pl 700: at the limit before gputide's cap
    assert node.sync() == (0, 1) and node.agent.failed is None   # the GPU forgotten: one write
    assert json.loads(node.state.read_text()) == {}
    for _ in range(3):
        assert node.sync() == (0, 0) and node.agent.failed is None


class GpusGone:
    """The NVML target, less the GPUs in `gone` (replaced, or no longer on the node)."""

    def __init__(self, target):
        self.target, self.gone = target, set()

    def apply_power_caps(self, caps):
        return self.target.apply_power_caps(caps)

    def power_limits(self):
        return {uuid: limit for uuid, limit in self.target.power_limits().items() if uuid not in self.gone}

    def returned_sets(self):
        return self.target.returned_sets()


def test_a_gpu_gone_from_the_node_while_it_waits_fails_no_more(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    node.agent.target = target = GpusGone(node.agent.target)
    assert node.asked(2) == [1, 2]   # next at 4
    target.gone = {"GPU-0"}   # the entry names a GPU the node has no more: ignored (logged once)
    for _ in range(3):
        assert node.sync() == (0, 0) and node.agent.failed is None   # was: failed, saying the driver refuses it


def test_a_gpu_whose_limit_is_unread_keeps_its_wait(tmp_path, monkeypatch):
    node = Node(tmp_path, monkeypatch)
    assert node.asked(5) == [1, 2, 4]   # next at 8
    node.gpu.fail["nvmlDeviceGetPowerManagementLimit"] = NVMLError_Timeout
    assert node.sync()[0] == 0   # sync 6: not asked, its limit unread (judged on no limit: blind)
    assert "could not be read" in node.agent.failed and "GPU-0 (NVMLError_NoPermission" in node.agent.failed
    del node.gpu.fail["nvmlDeviceGetPowerManagementLimit"]
    assert node.asked(3) == [8]   # not asked at once at sync 7, as if its wait had ended


@pytest.mark.parametrize("given_back", [{"GPU-0": Restore(250.0)}, {}], ids=["restore", "deleted"])
def test_a_gpu_whose_limit_is_unread_while_asked_for_another_kind_of_thing_waits_no_more(tmp_path, monkeypatch,
                                                                                         given_back):
    """Not asked at a sync whose limit is unread, its wait is kept only while it is asked for the same kind of thing:
    a give-back asked meanwhile (not Set, the limit unread) ends it, so the cap asked again once the limit reads is
    asked at once, as after a give-back carried out (was, without that clause: still waiting for the refused cap)."""
    node = capped_then_refused(tmp_path, monkeypatch)
    assert [node.sync()[0] for _ in range(2)] == [0, 1]   # syncs 4 and 5: refused again, next at sync 9
    node.gpu.fail["nvmlDeviceGetPowerManagementLimit"] = NVMLError_Timeout
    node.source.caps = given_back
    assert node.sync()[0] == 0 and "could not be read" in node.agent.failed   # sync 6: its give-back waits
    del node.gpu.fail["nvmlDeviceGetPowerManagementLimit"]
    node.source.caps = {"GPU-0": 200.0}   # capped again
    assert node.sync()[0] == 1   # sync 7: asked at once (not at 9)


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


def test_a_lost_cap_whose_reapply_is_refused_is_counted_lost_only_when_asked_again(tmp_path, monkeypatch):
    """A reset lifts gputide's landed cap and the driver refuses the re-cap while the GPU recovers: the cap was
    counted lost (`gputide_power_cap_agent_caps_lost_total`, "applied again") at every sync, the backoff's syncs that
    asked nothing included (audit a18: 8 in 8 syncs, 4 Sets)."""
    node = Node(tmp_path, monkeypatch)
    del node.gpu.fail[SET]
    node.sync()
    assert node.gpu.limit_mw == 250 * W
    node.gpu.limit_mw, node.gpu.fail[SET] = 700 * W, NVMLError_NotSupported   # reset: back at its default
    asked, lost = [], []
    for _ in range(16):
        if node.sync()[0]:
            asked.append(node.count)
        if "GPU-0" in node.agent.lost:
            lost.append(node.count)
    assert asked == [2, 3, 5, 9, 17][:len(asked)] and len(asked) >= 4
    assert lost == asked   # counted when applied again, not at each sync it waits


class Unreadable:
    def read(self):
        return None


def test_a_lost_cap_is_not_counted_again_at_a_sync_whose_caps_are_unreadable(tmp_path, monkeypatch):
    """`lost` is the sync's own: a sync that returned early for an unreadable source kept the last one's, and the CLI
    counted it in caps_lost_total again at each such sync (review r5)."""
    node = Node(tmp_path, monkeypatch)
    del node.gpu.fail[SET]
    node.sync()
    node.gpu.limit_mw = 700 * W   # reset: lost, re-capped
    node.sync()
    assert node.agent.lost == {"GPU-0"}
    node.agent.source = Unreadable()
    node.sync()
    assert node.agent.lost == set()
