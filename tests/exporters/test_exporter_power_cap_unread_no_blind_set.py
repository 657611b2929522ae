"""A GPU under gputide's cap whose limit cannot be read is not Set when its cap changes: it waits for a sync that
reads it (`PowerCapAgent._request`), as a first cap does.

Each Set is a compare-and-set on the limit the last `power_limits` read (`exporters.backends.nvml_power`), skipped
where that limit was unread (NaN): a cap changed while the GPU's limit was unread was Set blind, over an operator's
lower limit (review s33r3 finding 2: 150 W set by hand under a 200 W cap became 300 W, then was given back to the
700 W default; here 250 W under 300 W, the fake GPU's least being 200 W)."""

from __future__ import annotations

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NotSupported
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapAgent
from tests.exporters.test_exporter_power_cap_stuck_gpu import Caps


class Unreadable(FakeNvml):
    """The power limit reads NotSupported while `bad`."""

    bad = False

    def nvmlDeviceGetPowerManagementLimit(self, h):
        if self.bad:
            raise NVMLError_NotSupported()
        return super().nvmlDeviceGetPowerManagementLimit(h)


def test_a_changed_cap_waits_for_the_limit_to_read_and_leaves_an_operators_limit_alone():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = Unreadable(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(1.0))
    backend.read()
    source = Caps({"GPU-1": 300.0})
    agent = PowerCapAgent(source, backend)
    assert agent.sync() == {"GPU-1": 300.0}
    devs[1].limit_mw = 250_000   # an operator's nvidia-smi -pl 250 under gputide's cap
    nvml.bad, source.caps = True, {"GPU-1": 400.0}
    assert agent.sync() == {} and devs[1].limit_mw == 250_000
    assert "GPU-1 could not be read" in agent.failed
    nvml.bad = False
    agent.sync()
    assert devs[1].limit_mw == 250_000 and agent.before.get("GPU-1").before_w == 250.0   # the operator's: kept
    source.caps = {}
    agent.sync()
    assert devs[1].limit_mw == 250_000 and agent.failed is None   # given back to the operator's
