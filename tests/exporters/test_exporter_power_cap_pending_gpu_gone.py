"""A pending Set (one that had not returned) for a GPU no longer on the node is forgotten in the state file too, not
only in the agent's memory (`PowerCapAgent._settle`).

It stayed in the limits before (``pending_w``), so every agent restart reloaded it as pending, forgot it again at
its first sync, and kept the file saying a Set was in flight (review s33r3 finding 4 LOW)."""

from __future__ import annotations

import json
import math

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapAgent
from exporters.power_limits_before import LimitsBefore
from tests.exporters.test_exporter_power_cap_stuck_gpu import Caps


def test_a_pending_set_of_a_gpu_gone_leaves_the_state_file(tmp_path):
    nvml = FakeNvml([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)])
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(1.0))
    backend.read()
    state = tmp_path / "limits-before.json"
    state.write_text(json.dumps({"GPU-9": {"before_w": 700.0, "set_w": 300.0, "pending_w": 250.0}}))
    agent = PowerCapAgent(Caps({}), backend, LimitsBefore(state))
    assert agent.sync() == {} and agent.failed is None
    assert json.loads(state.read_text()) == {"GPU-9": {"before_w": 700.0, "set_w": 300.0}}
    restarted = LimitsBefore(state)
    assert math.isnan(restarted.get("GPU-9").pending_w)
    assert PowerCapAgent(Caps({}), backend, restarted).sync() == {}
