"""`gputide_power_cap_agent_limit_before_watts` names no GPU whose first cap the driver refused (review of
ceaacb74/0c02ca1f): such a GPU is under no cap of gputide's and its give-back restores nothing, yet its record (the
refusal, `Held.refused`) stays in the state file while the cap is asked and while its give-back lasts, its limit
before then no longer followed. The gauge served it: refused at 700 W, given back, the operator's ``nvidia-smi -pl
300`` left it saying 700 W would be restored to a GPU running at 300 W to which nothing would be (on the fake
NVML)."""

from __future__ import annotations

import json

from balancer.cmd.power_cap_agent import sync_once
from exporters.backends.fake_nvml import FakeDevice, NVMLError_NoPermission
from tests.cli.test_cli_power_cap_agent_debug import BEFORE, W, agent

SET = "nvmlDeviceSetPowerManagementLimit"


def test_a_gpu_whose_first_cap_was_refused_has_no_limit_before_served_nor_after_its_give_back(tmp_path):
    gpus = [FakeDevice(uuid="GPU-0"), FakeDevice(uuid="GPU-1", minor=1)]   # both at the default 700 W
    a, caps, metrics, registry = agent(tmp_path, gpus, {"GPU-0": 400, "GPU-1": 400})
    gpus[1].fail = {SET: NVMLError_NoPermission}   # the driver refuses GPU-1's first cap
    sync_once(a, metrics)
    assert json.loads((tmp_path / "limits.json").read_text())["GPU-1"]["refused"] is True   # the record kept
    assert registry.get_sample_value(BEFORE, {"UUID": "GPU-0"}) == 700.0   # capped: its give-back restores 700 W
    assert registry.get_sample_value(BEFORE, {"UUID": "GPU-1"}) is None   # was: 700.0, no cap of gputide's
    caps.write_text(json.dumps({"GPU-0": 400, "GPU-1": {"restore": 400}}))
    sync_once(a, metrics)
    gpus[1].limit_mw = 300 * W   # the operator: nvidia-smi -pl 300, while the give-back lasts
    sync_once(a, metrics)
    assert json.loads((tmp_path / "limits.json").read_text())["GPU-1"]["refused"] is True   # still kept
    assert gpus[1].limit_mw == 300 * W   # nothing restored
    assert registry.get_sample_value(BEFORE, {"UUID": "GPU-1"}) is None   # was: 700.0
    assert registry.get_sample_value(BEFORE, {"UUID": "GPU-0"}) == 700.0
