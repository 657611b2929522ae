"""The power-cap agent's per-GPU calls run in each GPU's own job with the reads' deadline, without the defects that got
dacb21c reverted (audit s32y7, 5504e74). A Set cut at the deadline still lands when NVML returns: dacb21c refused it
and forgot it, so the next sync took gputide's own cap for an operator's and saved it as the limit before (given back
to 250 W, not 700 W: p1_late_cap.py), and a first cap that landed late once the caps file had dropped the GPU was
left on for good (p2_late_first.py). Now such a Set is pending: the next sync judges it from the limit the GPU reads
once its call has returned (at the watts asked: done, the limit before the one remembered), and leaves the GPU alone
meanwhile (not Set again, nothing given back, nothing taken as changed by hand). And an agent call no longer takes a
slow GPU's late read away before the collection serves it (p4_slow_agent.py).

Every wait is bounded: hung calls at most `BOUND_S`, the threads joined with a timeout."""

from __future__ import annotations

import json
import math
import threading
from pathlib import Path

import pytest

from exporters.backends.fake_nvml import FakeDevice
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_nvml_gpu_late_served import returned
from tests.exporters.test_exporter_power_cap_stuck_gpu import Caps, HungDevice, in_thread

DEADLINE_S = 0.2
SET = "nvmlDeviceSetPowerManagementLimit"


def node(tmp_path: Path, caps: dict[str, float], fake: type[HungDevice] = HungDevice):
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = fake(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    state = tmp_path / "before.json"
    source = Caps(caps)
    return devs, nvml, backend, source, PowerCapAgent(source, backend, LimitsBefore(state)), state


def late_set(nvml: HungDevice, agent: PowerCapAgent) -> dict:
    """A sync whose Set on GPU-1 does not return in time: the agent goes on (it held the backend's lock for good)."""
    nvml.hung, nvml.hang_on = "GPU-1", SET
    t, out = in_thread(agent.sync)
    assert not t.is_alive(), "the agent's sync waited for the Set that does not return"
    assert "GPU-1" in agent.failed and "pending" in agent.failed
    return out


def lands(nvml: HungDevice, backend: NvmlBackend) -> None:
    """The hung Set returns, and NVML sets the limit it was asked for."""
    nvml.release.set()
    returned(backend.reads)
    nvml.hung = None


def test_a_changed_cap_set_late_is_taken_as_gputides_and_given_back_to_the_limit_before_gputide(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    assert agent.sync() == {"GPU-1": 300.0}
    source.caps = {"GPU-1": 250.0}
    try:
        assert late_set(nvml, agent) == {"result": {}}
        assert backend.reads.stuck() == ["GPU-1"] and devs[1].limit_mw == 300_000
        assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "set_w": 300.0, "pending_w": 250.0}}
        t, out = in_thread(agent.sync)   # still inside NVML: not Set again, nothing judged
        assert out == {"result": {}} and "pending" in agent.failed
    finally:
        lands(nvml, backend)
    assert devs[1].limit_mw == 250_000
    assert agent.sync() == {"GPU-1": 250.0} and agent.failed is None   # done: gputide's cap, not an operator's
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "set_w": 250.0}}
    source.caps = {}
    assert agent.sync() == {"GPU-1": 700.0} and devs[1].limit_mw == 700_000   # not 250 W (p1_late_cap)
    assert json.loads(state.read_text()) == {}


def test_a_first_cap_set_late_is_given_back_once_it_lands_though_the_caps_file_dropped_the_gpu_meanwhile(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    try:
        assert late_set(nvml, agent) == {"result": {}}
        assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "pending_w": 300.0}}
        source.caps = {}
        t, out = in_thread(agent.sync)
        assert out == {"result": {}} and "pending" in agent.failed
        assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "pending_w": 300.0}}   # not forgotten
    finally:
        lands(nvml, backend)
    assert devs[1].limit_mw == 300_000   # the late first cap landed
    assert agent.sync() == {"GPU-1": 700.0} and agent.failed is None   # judged done, then given back
    assert devs[1].limit_mw == 700_000 and json.loads(state.read_text()) == {}
    assert agent.sync() == {} and devs[1].limit_mw == 700_000


def test_a_first_cap_that_landed_late_is_given_back_when_the_caps_file_drops_the_gpu(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    try:
        assert late_set(nvml, agent) == {"result": {}}
    finally:
        lands(nvml, backend)
    source.caps = {}
    assert agent.sync() == {"GPU-1": 700.0} and devs[1].limit_mw == 700_000
    assert json.loads(state.read_text()) == {}


def test_a_late_set_that_did_not_take_is_asked_again(tmp_path):
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    assert agent.sync() == {"GPU-1": 300.0}
    source.caps = {"GPU-1": 250.0}
    set_limit = nvml.nvmlDeviceSetPowerManagementLimit
    refused = threading.Event()

    def refuses(h, mw):   # hangs, then the driver refuses it
        nvml.release.wait(10)
        refused.set()
        raise nvml.NVMLError_NoPermission()

    nvml.nvmlDeviceSetPowerManagementLimit = refuses
    try:
        t, out = in_thread(agent.sync)
        assert out == {"result": {}} and "pending" in agent.failed
    finally:
        nvml.release.set()
    returned(backend.reads)
    assert refused.is_set() and devs[1].limit_mw == 300_000
    assert json.loads(state.read_text())["GPU-1"]["pending_w"] == 250.0
    nvml.nvmlDeviceSetPowerManagementLimit = set_limit
    assert agent.sync() == {"GPU-1": 250.0} and agent.failed is None   # not done: asked again
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 700.0, "set_w": 250.0}}


@pytest.mark.parametrize("first", [False, True], ids=["changed cap", "first cap"])
def test_an_agent_restarted_while_a_set_was_pending_judges_it_from_the_limits_before(tmp_path, first):
    """The exporter restarted (its liveness fails while a GPU's call is stuck) after a late Set landed: the new agent
    knows only the state file. Without the Set kept pending there, it took its own 250 W cap for an operator's (and
    gave back 250 W), or dropped a first cap it never knew it had set (left at 300 W for good)."""
    devs, nvml, backend, source, agent, state = node(tmp_path, {"GPU-1": 300.0})
    if not first:
        assert agent.sync() == {"GPU-1": 300.0}
        source.caps = {"GPU-1": 250.0}
    try:
        late_set(nvml, agent)
    finally:
        lands(nvml, backend)
    cap_w = 300.0 if first else 250.0
    assert devs[1].limit_mw == cap_w * 1000
    source.caps = {}   # and the caps file dropped the GPU meanwhile
    restarted = PowerCapAgent(source, backend, LimitsBefore(state))
    # judged done (gputide's cap, not an operator's) and, no longer asked for, given back to the limit before
    assert restarted.sync() == {"GPU-1": 700.0} and restarted.failed is None and devs[1].limit_mw == 700_000
    assert json.loads(state.read_text()) == {}


def test_an_agent_call_leaves_a_slow_gpus_late_read_for_the_collection_to_serve():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = HungDevice(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    nvml.hung, nvml.hang_on = "GPU-1", "nvmlDeviceGetTemperature"   # slower than the deadline, not the agent's calls
    try:
        assert math.isnan(backend.read().values["DCGM_FI_DEV_GPU_TEMP"][1])   # late
        nvml.release.set()
        returned(backend.reads)   # its late read has returned, to be served by the next collection
        assert backend.power_limits()["GPU-1"].current_w == 700.0   # the agent's sync in between
        nvml.release.clear()
        assert backend.read().values["DCGM_FI_DEV_GPU_TEMP"].tolist() == [45, 45]   # late again: the earlier served
    finally:
        nvml.release.set()
    returned(backend.reads)
