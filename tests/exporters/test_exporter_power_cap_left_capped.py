"""A cap whose key was deleted while no agent ran (the annotation removed by hand while the agent crash-looped, or
the power-cap component uninstalled, the annotations cleaned up, and installed again) stayed on its GPU for good:
the restarted agent gave back only what it had applied itself since it started. Its state file says which GPUs an
earlier agent capped and at what, so it gives them back, only while they still run at that cap (fake NVML)."""

from __future__ import annotations

import json

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import JsonFileCaps, PowerCapAgent
from exporters.power_limits_before import LimitsBefore

W = 1000   # milliwatts


@pytest.mark.parametrize(("by_hand_w", "expected_w"), [(None, 250), (220, 220)],
                         ids=["still at gputide's cap: the operator's 250 W back", "lowered by hand since: left"])
def test_a_cap_deleted_while_no_agent_ran_is_given_back_by_the_next_one(tmp_path, by_hand_w, expected_w):
    gpus = [FakeDevice(uuid="GPU-0", limit_mw=250 * W), FakeDevice(uuid="GPU-1", minor=1)]
    caps, state = tmp_path / "caps.json", tmp_path / "limits.json"
    caps.write_text(json.dumps({"GPU-0": 200, "GPU-1": 300}))
    assert PowerCapAgent(JsonFileCaps(caps), NvmlBackend(FakeNvml(gpus)), LimitsBefore(state)).sync() == \
        {"GPU-0": 200.0, "GPU-1": 300.0}
    # the agent stops; GPU-0's key is deleted meanwhile; GPU-1 stays capped
    caps.write_text(json.dumps({"GPU-1": 300}))
    if by_hand_w is not None:
        gpus[0].limit_mw = by_hand_w * W
    restarted = PowerCapAgent(JsonFileCaps(caps), NvmlBackend(FakeNvml(gpus)), LimitsBefore(state))
    restarted.sync()
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (expected_w * W, 300 * W) and restarted.failed is None
    assert set(json.loads(state.read_text())) == {"GPU-1"}
    assert restarted.sync() == {}   # nothing more to do
    assert gpus[0].limit_mw == expected_w * W
