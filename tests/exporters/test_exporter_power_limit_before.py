"""gputide never raises a GPU above the limit an operator set: the power-cap agent gives a GPU back to the limit it
found before its first cap (kept in a state file across agent restarts), not to the board's default, and a limit
changed by hand while gputide's cap is in force takes its place (on the in-repo fake NVML)."""

from __future__ import annotations

import json

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_Timeout
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import JsonFileCaps, PowerCapAgent
from exporters.power_limits_before import Held, LimitsBefore

W = 1000   # milliwatts
GIVE_BACKS = [pytest.param({"GPU-0": {"restore": 200}}, id="a restore entry"), pytest.param({}, id="its key removed")]


@pytest.fixture
def gpus() -> list[FakeDevice]:
    """A 600 W board (200..700 W) an operator runs at 250 W (nvidia-smi -pl 250), and one at its default."""
    return [FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{i:02x}:00.0", limit_mw=(250, 600)[i] * W,
                       default_limit_mw=600 * W) for i in range(2)]


@pytest.fixture
def caps(tmp_path):
    path = tmp_path / "caps.json"

    def write(doc: dict) -> JsonFileCaps:
        path.write_text(json.dumps(doc))
        return JsonFileCaps(path)

    return write


def agent(source, gpus, state) -> PowerCapAgent:
    """An agent as `gputide power-cap-agent --state-file` starts one (a restart: a new one on the same file)."""
    return PowerCapAgent(source, NvmlBackend(FakeNvml(gpus)), LimitsBefore(state))


@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_a_give_back_restores_the_operators_limit_not_the_default(caps, gpus, tmp_path, give_back):
    a = agent(caps({"GPU-0": 200, "GPU-1": 400}), gpus, tmp_path / "state.json")
    assert a.sync() == {"GPU-0": 200.0, "GPU-1": 400.0}
    a.source = caps({**give_back, "GPU-1": 400})
    assert a.sync() == {"GPU-0": 250.0} and a.failed is None
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (250 * W, 400 * W)
    assert a.sync() == {}


@pytest.mark.parametrize("give_back", GIVE_BACKS[:1])
def test_the_limit_before_outlives_a_restarted_agent(caps, gpus, tmp_path, give_back):
    state = tmp_path / "state" / "limits.json"
    agent(caps({"GPU-0": 200}), gpus, state).sync()
    assert json.loads(state.read_text()) == {"GPU-0": {"before_w": 250.0, "set_w": 200.0}}
    restarted = agent(caps({"GPU-0": 200}), gpus, state)   # applies every cap again: it is its own, not the operator's
    assert restarted.sync() == {"GPU-0": 200.0}
    restarted = agent(caps(give_back), gpus, state)   # given back while no agent ran
    assert restarted.sync() == {"GPU-0": 250.0} and gpus[0].limit_mw == 250 * W
    assert json.loads(state.read_text()) == {}


def test_no_cap_raises_a_gpu_above_the_operators_limit(caps, gpus, tmp_path):
    a = agent(caps({"GPU-0": 400}), gpus, tmp_path / "state.json")
    a.sync()
    assert gpus[0].limit_mw == 250 * W


@pytest.mark.parametrize("give_back", GIVE_BACKS)
def test_a_limit_raised_by_hand_under_gputides_cap_is_the_one_given_back(caps, gpus, tmp_path, give_back):
    a = agent(caps({"GPU-0": 200}), gpus, tmp_path / "state.json")
    a.sync()
    gpus[0].limit_mw = 300 * W   # nvidia-smi -pl 300 while capped: the operator's limit now, the cap applied again
    assert a.sync() == {"GPU-0": 200.0}
    a.source = caps(give_back)
    assert a.sync() == {"GPU-0": 300.0} and gpus[0].limit_mw == 300 * W


def test_a_limit_lowered_by_hand_under_gputides_cap_is_never_raised(caps, gpus, tmp_path):
    a = agent(caps({"GPU-0": 220}), gpus, tmp_path / "state.json")
    a.sync()
    gpus[0].limit_mw = 210 * W   # nvidia-smi -pl 210 while capped
    a.sync()
    a.source = caps({"GPU-0": 240})   # the controller eases its cap
    a.sync()
    assert gpus[0].limit_mw == 210 * W
    gpus[0].limit_mw = 230 * W   # and the operator changes their mind again: their limit, under the 240 W cap
    a.sync()
    a.source = caps({})
    a.sync()
    assert gpus[0].limit_mw == 230 * W


def test_a_reboot_resets_the_limit_before_to_the_one_in_force(caps, gpus, tmp_path):
    """The operator's nvidia-smi -pl is gone with the reboot as gputide's cap is; the state file is not."""
    state = tmp_path / "state.json"
    agent(caps({"GPU-0": 200}), gpus, state).sync()
    gpus[0].limit_mw = gpus[0].default_limit_mw
    restarted = agent(caps({"GPU-0": 200}), gpus, state)
    assert restarted.sync() == {"GPU-0": 200.0}
    restarted.source = caps({})
    restarted.sync()
    assert gpus[0].limit_mw == 600 * W


def test_a_first_cap_waits_until_the_limit_before_it_reads(caps, gpus, tmp_path):
    gpus[0].fail["nvmlDeviceGetPowerManagementLimit"] = NVMLError_Timeout
    a = agent(caps({"GPU-0": 200}), gpus, tmp_path / "state.json")
    assert a.sync() == {} and "GPU-0 could not be read" in a.failed
    gpus[0].fail.clear()
    assert a.sync() == {"GPU-0": 200.0} and a.failed is None
    a.source = caps({})
    assert a.sync() == {"GPU-0": 250.0}


def test_a_state_file_that_cannot_be_written_fails_the_sync_but_the_gpu_is_capped(caps, gpus, tmp_path):
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    a = agent(caps({"GPU-0": 200}), gpus, blocker / "state.json")
    assert a.sync() == {"GPU-0": 200.0} and "could not be written" in a.failed
    a.source = caps({})
    assert a.sync() == {"GPU-0": 250.0}   # kept in memory meanwhile


@pytest.mark.parametrize("content", ["not json", "[1]", '{"GPU-0": {"set_w": 200}}', '{"GPU-0": 250}'])
def test_an_unreadable_state_file_is_read_as_empty(tmp_path, content):
    state = tmp_path / "state.json"
    state.write_text(content)
    assert list(LimitsBefore(state).items()) == []
    store = LimitsBefore(state)
    store.put("GPU-0", Held(250.0))
    assert LimitsBefore(state).get("GPU-0") == Held(250.0)


def test_a_first_cap_the_driver_refused_and_no_longer_asked_for_leaves_no_limit_before(caps, gpus, tmp_path):
    from exporters.backends.fake_nvml import NVMLError_NoPermission

    gpus[0].fail["nvmlDeviceSetPowerManagementLimit"] = NVMLError_NoPermission
    a = agent(caps({"GPU-0": 200}), gpus, tmp_path / "state.json")
    a.sync()
    gpus[0].fail.clear()
    a.source = caps({})   # withdrawn before it was ever applied
    a.sync()
    gpus[0].limit_mw = 300 * W   # the operator's limit since
    a.source = caps({"GPU-0": 200})
    a.sync()
    a.source = caps({})
    a.sync()
    assert gpus[0].limit_mw == 300 * W   # not the 250 W found before the refused cap
