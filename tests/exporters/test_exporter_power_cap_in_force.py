"""A cap whose watts are the limit already in force is not Set again: a container without CAP_SYS_ADMIN on a node
already at that limit (an operator's ``nvidia-smi -pl``) had its Set refused NoPermission (or NotSupported), and the
sync failed for good, refused a limit the GPU had. The NVML target reads the limit right before each Set (its
compare-and-set) and, at the very milliwatts to set, counts it set without asking the driver. A limit one milliwatt
off is still asked by the target. The agent asks nothing for a GPU already at the cap with nothing written down
(found in force: the operator's, no Set of gputide's put it there), and gives it back with nothing to put back. Fake
NVML, whose Set the driver refuses throughout unless a test says otherwise."""

from __future__ import annotations

import json
import logging

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission, NVMLError_NotSupported
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import Expiring, PowerCapAgent, PowerCapError, Restore
from exporters.power_limits_before import LimitsBefore

W = 1000   # milliwatts
SET = "nvmlDeviceSetPowerManagementLimit"


class Caps:
    def __init__(self, caps):
        self.caps = caps

    def read(self):
        return dict(self.caps)


class Node:
    """One GPU (default 700 W) at `limit_mw`, its Set refused with `refusal`; the agent asked for `caps`."""

    def __init__(self, tmp_path, limit_mw, caps, refusal=NVMLError_NoPermission):
        self.gpu = FakeDevice(uuid="GPU-0", limit_mw=limit_mw, default_limit_mw=700 * W)
        self.gpu.fail[SET] = refusal
        self.nvml = FakeNvml([self.gpu])
        self.state = tmp_path / "before.json"
        self.source = Caps(caps)
        self.agent = PowerCapAgent(self.source, NvmlBackend(self.nvml), LimitsBefore(self.state))

    def sync(self):
        """One sync: what it applied and how many Sets it asked NVML."""
        sets = self.nvml.calls.count(SET)
        applied = self.agent.sync()
        return applied, self.nvml.calls.count(SET) - sets


@pytest.mark.parametrize("refusal", [NVMLError_NoPermission, NVMLError_NotSupported])
def test_a_cap_at_the_limit_in_force_is_not_asked_and_the_sync_does_not_fail(tmp_path, refusal):
    node = Node(tmp_path, 250 * W, {"GPU-0": 250.0}, refusal)
    for _ in range(3):   # in force, the operator's: nothing to ask (`_found_in_force`)
        assert node.sync() == ({}, 0)
        assert node.agent.failed is None and node.agent.lost == set()   # was: refused, failed for good
    assert node.gpu.limit_mw == 250 * W
    assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 250.0, "refused": True}}


def test_a_cap_above_an_operators_limit_held_to_it_is_applied_and_given_back_without_a_set(tmp_path):
    """nvidia-smi -pl 250, then the controller's 300 W cap: held to the limit before (250 W), the limit in force."""
    node = Node(tmp_path, 250 * W, {"GPU-0": 300.0})
    assert node.sync() == ({"GPU-0": 250.0}, 0)
    assert node.agent.failed is None and node.agent.lost == set()
    assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 250.0, "set_w": 250.0}}
    node.source.caps = {}   # released: given back to the limit before, 250 W, in force already
    assert node.sync() == ({"GPU-0": 250.0}, 0)
    assert node.agent.failed is None and json.loads(node.state.read_text()) == {}


def test_a_cap_at_another_limit_is_still_asked(tmp_path):
    node = Node(tmp_path, 700 * W, {"GPU-0": 250.0})
    assert node.sync() == ({}, 1)
    assert "NVMLError_NoPermission" in node.agent.failed and node.gpu.limit_mw == 700 * W


def test_the_target_asks_the_driver_for_a_limit_one_milliwatt_off(tmp_path):
    """Only the very milliwatts are in force for the target (the agent takes a limit within `TOLERANCE_W` of a cap
    for it, and asks nothing then)."""
    node = Node(tmp_path, 250 * W + 1, {})
    node.agent.target.power_limits()
    with pytest.raises(PowerCapError) as err:
        node.agent.target.apply_power_caps({"GPU-0": 250.0})
    assert "NVMLError_NoPermission" in err.value.refused["GPU-0"] and node.nvml.calls.count(SET) == 1
    assert node.gpu.limit_mw == 250 * W + 1


@pytest.mark.parametrize("given_back", ["restore", "expired", "deleted"])
@pytest.mark.parametrize("limit_mw", [250 * W, 250 * W + 1], ids=["at the cap", "one milliwatt off"])
def test_a_cap_found_in_force_is_given_back_without_a_set_nor_a_failure(tmp_path, caplog, given_back, limit_mw):
    """An agent without CAP_SYS_ADMIN, a GPU already at the 250 W cap asked and nothing written down (an operator's
    ``nvidia-smi -pl 250``): no Set for the cap, none for its give-back, by this agent or one restarted under it, and
    no sync fails. Was: the give-back restored the default with a Set the driver refused, failing for good."""
    node = Node(tmp_path, limit_mw, {"GPU-0": 250.0})
    with caplog.at_level(logging.ERROR):
        assert node.sync()[1] == 0 and node.agent.failed is None
        node.source.caps = {"restore": {"GPU-0": Restore(250.0)}, "expired": {"GPU-0": Expiring(250.0, 0.0)},
                            "deleted": {}}[given_back]
        for restarted in (False, False, True, False):
            if restarted:
                node.agent = PowerCapAgent(node.source, node.agent.target, LimitsBefore(node.state))
            assert node.sync() == ({}, 0)
            assert node.agent.failed is None
    assert node.gpu.limit_mw == limit_mw and node.nvml.calls.count(SET) == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []


def test_a_cap_found_in_force_stays_the_operators_under_an_agent_allowed_to_set(tmp_path):
    """With CAP_SYS_ADMIN too: the operator's 250 W is left by the give-back (was: raised to the 700 W default, a
    limit gputide never set overridden); a lower cap lands, and its give-back puts the operator's 250 W back."""
    node = Node(tmp_path, 250 * W, {"GPU-0": 250.0})
    del node.gpu.fail[SET]
    assert node.sync() == ({}, 0)
    node.source.caps = {"GPU-0": 200.0}
    assert node.sync() == ({"GPU-0": 200.0}, 1) and node.gpu.limit_mw == 200 * W
    node.source.caps = {"GPU-0": Restore(200.0)}
    assert node.sync() == ({"GPU-0": 250.0}, 1) and node.gpu.limit_mw == 250 * W
    node.source.caps = {"GPU-0": 250.0}   # capped at its limit again: held to it (the limit before), no Set
    assert node.sync()[1] == 0
    node.source.caps = {}
    node.sync()
    node.sync()
    assert node.gpu.limit_mw == 250 * W and node.agent.failed is None


def test_a_refused_first_cap_put_in_force_by_an_operator_is_not_asked_and_stays_the_operators(tmp_path):
    """The driver refused gputide's first 250 W cap; an operator sets ``nvidia-smi -pl 250``: in force, nothing to
    ask (was: refused for good, the sync failing), and not taken for gputide's cap (`Held.refused` kept), so its
    give-back leaves the operator's limit, an agent restarted under it too. The driver allows Sets before the
    give-back, so a raise would land (was: taken for gputide's cap, the give-back forgot the GPU, and the agent
    restarted under it raised the operator's 250 W to the 700 W default)."""
    node = Node(tmp_path, 700 * W, {"GPU-0": 250.0})
    assert node.sync() == ({}, 1) and node.agent.failed
    node.gpu.limit_mw = 250 * W   # the operator
    for _ in range(3):
        assert node.sync() == ({}, 0)
        assert node.agent.failed is None and node.agent.lost == set()
    assert json.loads(node.state.read_text()) == {"GPU-0": {"before_w": 250.0, "refused": True}}
    del node.gpu.fail[SET]   # privileged at last: a Set raising the limit would land
    node.source.caps = {"GPU-0": Restore(250.0)}   # given back (the controller keeps the give-back a while)
    node.sync()
    assert node.gpu.limit_mw == 250 * W and node.agent.failed is None
    node.agent = PowerCapAgent(node.source, node.agent.target, LimitsBefore(node.state))   # restarted under it
    for _ in range(2):
        node.sync()
        assert node.gpu.limit_mw == 250 * W and node.agent.failed is None
