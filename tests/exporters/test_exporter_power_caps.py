"""The power-cap path on a node: `PowerCapAgent` applying what a source asks for through the NVML backend (on the
in-repo fake NVML). gputide only ever lowers a GPU's limit, gives it back exactly, and says when it could not."""

from __future__ import annotations

import json
import logging
import math

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission, NVMLError_Timeout
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import RESTORE, JsonFileCaps, PowerCapAgent, PowerCapError, Restore, parse_caps

W = 1000   # milliwatts


def pcie_board(i: int = 0, **kw) -> FakeDevice:
    """A board whose maximum limit is above the one it boots with (as on many PCIe boards): 200..700 W, default
    600 W, running at its default."""
    return FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{i:02x}:00.0", limit_mw=600 * W,
                      default_limit_mw=600 * W, **kw)


@pytest.fixture
def gpus() -> list[FakeDevice]:
    return [pcie_board(0), pcie_board(1)]


@pytest.fixture
def backend(gpus) -> NvmlBackend:
    return NvmlBackend(nvml=FakeNvml(gpus), hostname="n1")


@pytest.fixture
def caps_file(tmp_path):
    path = tmp_path / "caps.json"

    def write(caps: dict | str | None) -> JsonFileCaps:
        if caps is None:
            path.unlink(missing_ok=True)
        else:
            path.write_text(caps if isinstance(caps, str) else json.dumps(caps))
        return JsonFileCaps(path)

    return write


# ---- the backend -------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("watts", "limit_w"), [
    pytest.param(700.0, 600.0, id="the catalogue TDP above the board's default sets the default, not the maximum"),
    pytest.param(RESTORE, 600.0, id="a restore sets exactly the default"),
    pytest.param(450.0, 450.0, id="a cap below the default is set as asked"),
    pytest.param(50.0, 200.0, id="a cap below the board's minimum sets the minimum"),
])
def test_no_request_sets_a_gpu_above_the_limit_it_boots_with(backend, gpus, watts, limit_w):
    assert backend.apply_power_caps({"GPU-0": watts}) == {"GPU-0": limit_w}
    assert gpus[0].limit_mw == limit_w * W


def test_a_default_limit_above_the_maximum_is_held_to_the_maximum():
    gpu = FakeDevice(uuid="GPU-0", default_limit_mw=800 * W, max_limit_mw=700 * W)
    assert NvmlBackend(FakeNvml([gpu])).apply_power_caps({"GPU-0": RESTORE}) == {"GPU-0": 700.0}


def test_limits_the_driver_refuses_raise_after_the_other_gpus_are_set(backend, gpus):
    gpus[0].fail["nvmlDeviceSetPowerManagementLimit"] = NVMLError_NoPermission
    with pytest.raises(PowerCapError) as err:
        backend.apply_power_caps({"GPU-0": 400.0, "GPU-1": 450.0})
    assert err.value.applied == {"GPU-1": 450.0}
    assert list(err.value.refused) == ["GPU-0"] and "NoPermission" in err.value.refused["GPU-0"]
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (600 * W, 450 * W)


def test_power_limits_are_each_gpus_limit_now_its_default_and_its_minimum(backend, gpus):
    gpus[1].limit_mw = 350 * W
    gpus[0].lost = True
    limits = backend.power_limits()
    assert limits["GPU-1"] == (350.0, 600.0, 200.0)
    assert all(map(math.isnan, limits["GPU-0"]))   # known GPU, figures unknown: nothing is judged by them


# ---- the agent ---------------------------------------------------------------------------------------------------


def test_a_give_back_restores_exactly_the_default_limit(caps_file, backend, gpus):
    agent = PowerCapAgent(caps_file({"GPU-0": 450}), backend)
    assert agent.sync() == {"GPU-0": 450.0}
    agent.source = caps_file({"GPU-0": {"restore": 450}})   # the controller's give-back
    assert agent.sync() == {"GPU-0": 600.0} and gpus[0].limit_mw == 600 * W
    assert agent.failed is None
    assert agent.sync() == {}   # carried out once


def test_a_restore_entry_is_parsed_and_anything_else_in_an_object_spoils_the_document():
    assert parse_caps({"GPU-0": 450, "GPU-1": {"restore": 300}}) == {"GPU-0": 450.0, "GPU-1": Restore(300.0)}
    for bad in ({"restore": 0}, {"restore": "x"}, {"restore": 300, "by": "me"}, {}):
        with pytest.raises(ValueError, match="GPU-1"):
            parse_caps({"GPU-1": bad})


@pytest.mark.parametrize(("cap", "applied"), [pytest.param(450, 450, id="a cap set as asked"),
                                              pytest.param(50, 200, id="a cap the board held to its minimum")])
def test_a_give_back_written_while_no_agent_ran_is_carried_out_by_the_next_one(caps_file, gpus, cap, applied):
    PowerCapAgent(caps_file({"GPU-0": cap}), NvmlBackend(FakeNvml(gpus))).sync()
    assert gpus[0].limit_mw == applied * W
    # the agent is down (restarted, upgraded) while the controller gives GPU-0 back: its memory is gone with it
    agent = PowerCapAgent(caps_file({"GPU-0": {"restore": cap}}), NvmlBackend(FakeNvml(gpus)))
    assert agent.sync() == {"GPU-0": 600.0} and gpus[0].limit_mw == 600 * W
    assert agent.sync() == {}


@pytest.mark.parametrize("give_back", [pytest.param({"GPU-0": {"restore": 450}}, id="a restore entry"),
                                       pytest.param({}, id="its key removed")])
@pytest.mark.parametrize("by_hand", [300, 500], ids=["lowered by hand", "raised by hand"])
def test_a_give_back_never_overrides_a_limit_set_by_hand(caps_file, backend, gpus, give_back, by_hand, caplog):
    agent = PowerCapAgent(caps_file({"GPU-0": 450}), backend)
    agent.sync()
    agent.source = caps_file(give_back)
    gpus[0].limit_mw = by_hand * W   # nvidia-smi -i GPU-0 -pl ... between the last sync and the give-back
    with caplog.at_level(logging.INFO):
        assert agent.sync() == {} and agent.sync() == {}
    assert gpus[0].limit_mw == by_hand * W
    assert sum("left as it is" in r.getMessage() for r in caplog.records) == 1


def test_a_restore_entry_for_a_gpu_not_at_gputides_cap_is_left_by_a_restarted_agent(caps_file, gpus):
    gpus[0].limit_mw = 500 * W   # whatever the operator set, after gputide's give-back was carried out
    agent = PowerCapAgent(caps_file({"GPU-0": {"restore": 450}}), NvmlBackend(FakeNvml(gpus)))
    assert agent.sync() == {} and gpus[0].limit_mw == 500 * W


def test_without_the_gpus_limits_a_restore_entry_is_carried_out_once(caps_file):
    class Target:   # a target that cannot say where limits are (the simulated fleet)
        def __init__(self):
            self.asked = []

        def apply_power_caps(self, caps):
            self.asked.append(dict(caps))
            return {u: 600.0 if w == RESTORE else w for u, w in caps.items()}

    target = Target()
    agent = PowerCapAgent(caps_file({"GPU-0": {"restore": 450}}), target)
    assert agent.sync() == {"GPU-0": 600.0} and agent.sync() == {}
    assert target.asked == [{"GPU-0": RESTORE}]


@pytest.mark.parametrize("after", [pytest.param({"GPU-1": 400}, id="its key removed"),
                                   pytest.param({}, id="every key removed"),
                                   pytest.param(None, id="the file removed")])
def test_a_cap_no_longer_asked_for_is_given_back(caps_file, backend, gpus, after):
    agent = PowerCapAgent(caps_file({"GPU-0": 450, "GPU-1": 400}), backend)
    agent.sync()
    agent.source = caps_file(after)
    agent.sync()
    assert gpus[0].limit_mw == 600 * W and gpus[1].limit_mw == (400 if after else 600) * W
    assert agent.sync() == {}   # given back once, then nothing to do


@pytest.mark.parametrize("give_back", [pytest.param({"GPU-0": {"restore": 450}}, id="a restore entry"),
                                       pytest.param({}, id="its key deleted")])
def test_a_give_back_whose_limit_could_not_be_read_waits_for_the_next_sync(caps_file, backend, gpus, give_back):
    """One failed read of the GPU's limit (NaN) read as "no longer gputide's cap": the give-back was settled or
    forgotten and the cap stayed on for good, with no failure said. It waits now, counted failed, and is carried
    out once the limit reads again."""
    agent = PowerCapAgent(caps_file({"GPU-0": 450}), backend)
    agent.sync()
    agent.source = caps_file(give_back)
    gpus[0].fail["nvmlDeviceGetPowerManagementLimit"] = NVMLError_Timeout
    agent.sync()
    assert gpus[0].limit_mw == 450 * W and "GPU-0 could not be read" in agent.failed
    gpus[0].fail.clear()
    agent.sync()
    assert gpus[0].limit_mw == 600 * W and agent.failed is None


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"GPU-0": "hot"}', '{"GPU-0": -1}', '{"GPU-0": true}',
                                     '{"GPU-0": NaN}', '{"GPU-0": 450, "GPU-1": null}',
                                     '{"GPU-0": {"restore": -1}}', '{"GPU-0": {"watts": 450}}'])
def test_a_malformed_source_keeps_every_limit_and_says_so(caps_file, backend, gpus, content):
    agent = PowerCapAgent(caps_file({"GPU-0": 450, "GPU-1": 400}), backend)
    agent.sync()
    agent.source = caps_file(content)
    assert agent.sync() == {}
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (450 * W, 400 * W)   # not read as "no caps": nothing given back
    assert agent.failed
    agent.source = caps_file({"GPU-0": 450, "GPU-1": 400})
    assert agent.sync() == {} and agent.failed is None


def test_a_cap_raised_by_hand_is_applied_again_and_one_lowered_by_hand_is_left(caps_file, backend, gpus):
    agent = PowerCapAgent(caps_file({"GPU-0": 450, "GPU-1": 400}), backend)
    agent.sync()
    gpus[0].limit_mw = 600 * W   # nvidia-smi -i GPU-0 -pl 600
    gpus[1].limit_mw = 300 * W   # nvidia-smi -i GPU-1 -pl 300: lower still, gputide only caps
    assert agent.sync() == {"GPU-0": 450.0}
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (450 * W, 300 * W)


def test_a_given_back_gpu_is_not_held_at_its_default(caps_file, backend, gpus):
    agent = PowerCapAgent(caps_file({"GPU-0": 700}), backend)
    agent.sync()
    gpus[0].limit_mw = 650 * W   # raised by hand past its default after the give-back: not gputide's cap
    assert agent.sync() == {} and gpus[0].limit_mw == 650 * W


def test_a_gpu_the_driver_refuses_is_a_failure_and_tried_again(caps_file, backend, gpus):
    gpus[0].fail["nvmlDeviceSetPowerManagementLimit"] = NVMLError_NoPermission
    agent = PowerCapAgent(caps_file({"GPU-0": 450, "GPU-1": 400}), backend)
    assert agent.sync() == {"GPU-1": 400.0}
    assert agent.failed and "GPU-0" in agent.failed
    assert agent.sync() == {} and agent.failed   # GPU-0 asked again, refused again
    del gpus[0].fail["nvmlDeviceSetPowerManagementLimit"]
    # refused for good (NoPermission) twice: asked again two syncs later, not at each (a failure meanwhile)
    assert agent.sync() == {} and agent.failed and "GPU-0" in agent.failed
    assert agent.sync() == {"GPU-0": 450.0} and agent.failed is None


def test_a_cap_for_a_gpu_the_node_does_not_have_is_logged_once_and_is_no_failure(caps_file, backend, caplog):
    agent = PowerCapAgent(caps_file({"GPU-gone": 300, "GPU-0": 450}), backend)
    with caplog.at_level(logging.WARNING):
        assert agent.sync() == {"GPU-0": 450.0}
        assert agent.sync() == {} and agent.sync() == {}
    assert [r.getMessage() for r in caplog.records if "GPU-gone" in r.getMessage()] == [
        "power cap for GPU-gone ignored: no such GPU on this node (replaced?)"]
    assert agent.failed is None


def test_a_restarted_agent_applies_every_cap_again(caps_file, gpus):
    PowerCapAgent(caps_file({"GPU-0": 450}), NvmlBackend(FakeNvml(gpus))).sync()
    gpus[0].limit_mw = gpus[0].default_limit_mw   # the driver reloaded (the agent is restarted around it)
    assert PowerCapAgent(caps_file({"GPU-0": 450}), NvmlBackend(FakeNvml(gpus))).sync() == {"GPU-0": 450.0}
    assert gpus[0].limit_mw == 450 * W
