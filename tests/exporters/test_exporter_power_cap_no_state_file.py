"""An agent without a state file (the exporter's ``--power-caps-file`` mode, ``power-cap-agent`` without
``--state-file``) remembers nothing across a restart, so a GPU found at the cap asked with nothing written down may be
under its own cap: it is not taken for the operator's (`_found_in_force` is for agents with a state file). Was: a
restarted agent took its own 200 W cap for an operator's limit and left it on for good once the cap was deleted or
expired, the GPU never given back to its 700 W default. Fake NVML, Sets allowed."""

from __future__ import annotations

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import Expiring, PowerCapAgent, Restore

W = 1000   # milliwatts


class Caps:
    def __init__(self, caps):
        self.caps = caps

    def read(self):
        return dict(self.caps)


@pytest.mark.parametrize("given_back", ["deleted", "expired", "restore"])
def test_a_restarted_agent_without_a_state_file_gives_its_own_cap_back_to_the_default(given_back):
    gpu = FakeDevice(uuid="GPU-0", limit_mw=700 * W, default_limit_mw=700 * W)
    nvml = FakeNvml([gpu])
    source = Caps({"GPU-0": 200.0})
    assert PowerCapAgent(source, NvmlBackend(nvml)).sync() == {"GPU-0": 200.0}
    assert gpu.limit_mw == 200 * W
    restarted = PowerCapAgent(source, NvmlBackend(nvml))   # nothing kept: its own cap found in force
    restarted.sync()
    assert gpu.limit_mw == 200 * W and restarted.failed is None
    source.caps = {"deleted": {}, "expired": {"GPU-0": Expiring(200.0, 0.0)},
                   "restore": {"GPU-0": Restore(200.0)}}[given_back]
    restarted.sync()
    assert gpu.limit_mw == 700 * W and restarted.failed is None   # was: left at 200 W for good
    restarted.sync()
    assert gpu.limit_mw == 700 * W


def test_an_agent_without_a_state_file_caps_a_gpu_found_at_the_cap_as_any_other():
    """No restart: a GPU at 200 W with nothing remembered, capped at 200 W and given back, goes to its default (an
    operator's limit at the cap's watts cannot be told from the agent's own cap here)."""
    gpu = FakeDevice(uuid="GPU-0", limit_mw=200 * W, default_limit_mw=700 * W)
    source = Caps({"GPU-0": 200.0})
    agent = PowerCapAgent(source, NvmlBackend(FakeNvml([gpu])))
    assert agent.sync() == {"GPU-0": 200.0} and agent.failed is None
    source.caps = {}
    agent.sync()
    assert gpu.limit_mw == 700 * W and agent.failed is None
