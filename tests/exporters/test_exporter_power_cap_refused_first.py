"""A first cap the driver refused (no CAP_SYS_ADMIN, a GPU in recovery) kept the limit it found then as the GPU's
limit before gputide's cap, however long the refusals lasted: an operator who lowered the limit meanwhile
(``nvidia-smi -pl 250``) had it raised by the first cap that went through (held to the stale 600 W, not to 250 W)
and by the give-back (600 W). Until a cap has been applied, the limit before is the one in force (fake NVML)."""

from __future__ import annotations

import json

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import JsonFileCaps, PowerCapAgent
from exporters.power_limits_before import LimitsBefore

W = 1000   # milliwatts


def test_an_operator_limit_set_while_the_first_cap_is_refused_is_the_one_given_back(tmp_path):
    gpu = FakeDevice(uuid="GPU-0", limit_mw=600 * W, default_limit_mw=600 * W)
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"GPU-0": 400}))
    state = LimitsBefore(tmp_path / "limits.json")
    agent = PowerCapAgent(JsonFileCaps(caps), NvmlBackend(FakeNvml([gpu])), state)
    gpu.fail["nvmlDeviceSetPowerManagementLimit"] = NVMLError_NoPermission   # the agent not yet privileged
    assert agent.sync() == {} and agent.failed and gpu.limit_mw == 600 * W
    gpu.limit_mw = 250 * W   # the operator, meanwhile: nvidia-smi -pl 250
    agent.sync()
    assert state.get("GPU-0").before_w == 250.0
    del gpu.fail["nvmlDeviceSetPowerManagementLimit"]   # privileged at last
    # 400 W would raise it: held to 250 W, in force already (not asked, the operator's) and failing no more
    assert agent.sync() == {} and agent.failed is None and gpu.limit_mw == 250 * W
    caps.write_text(json.dumps({"GPU-0": 200}))
    assert agent.sync() == {"GPU-0": 200.0}
    caps.write_text(json.dumps({"GPU-0": {"restore": 200}}))
    assert agent.sync() == {"GPU-0": 250.0} and gpu.limit_mw == 250 * W   # not 600 W

    # but a GPU found at the cap asked is not an operator's: the agent crashed between setting its first cap and
    # writing it down (the state file says only what was found before)
    gpu = FakeDevice(uuid="GPU-0", limit_mw=400 * W, default_limit_mw=600 * W)
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"GPU-0": 400}))
    (tmp_path / "limits.json").write_text(json.dumps({"GPU-0": {"before_w": 600.0}}))
    state = LimitsBefore(tmp_path / "limits.json")
    agent = PowerCapAgent(JsonFileCaps(caps), NvmlBackend(FakeNvml([gpu])), state)
    agent.sync()
    assert state.get("GPU-0").before_w == 600.0
    caps.write_text(json.dumps({}))
    agent.sync()
    assert gpu.limit_mw == 600 * W
