"""A GPU that answers, but slower than the reads' deadline, is still capped and given back by the power-cap agent.

The agent's calls on a GPU run under the reads' deadline (fa5c495): a GPU whose limit read (three NVML calls) always
outran it read NaN at every sync, so it was never capped, and one capped while fast and slow since was never given
back (audit s33a8, p8_slow / p8b_slow_giveback); the agent before fa5c495, with no deadline, capped it. A limit read
that missed its deadline is now used at the next sync once it has returned (`NvmlPowerCaps.power_limits`), if it
began at most two agent intervals ago (`limits_max_age_s`) and no Set was made on the GPU since: such a GPU is capped
or given back a sync or two late, not never. Its late Set is pending and judged from what it returned (`returned_sets`).

Bounded: each slow call sleeps `CALL_S`; waits for the jobs are bounded (`returned`)."""

from __future__ import annotations

import time

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapAgent
from tests.exporters.test_exporter_nvml_gpu_late_served import returned
from tests.exporters.test_exporter_power_cap_stuck_gpu import Caps

DEADLINE_S, CALL_S = 0.1, 0.05   # a limit read is three calls: always late, back within a fraction of a second


class SlowPower(FakeNvml):
    """Every power-limit call on the GPU `slow` takes `CALL_S`."""

    slow: str | None = None

    def _dev(self, h, fn):
        if self.slow is not None and getattr(h, "target", h).uuid == self.slow and "PowerManagement" in fn:
            time.sleep(CALL_S)
        return super()._dev(h, fn)


def slow_node(caps: dict[str, float]):
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = SlowPower(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    source = Caps(caps)
    return devs, nvml, backend, source, PowerCapAgent(source, backend)


def syncs(agent: PowerCapAgent, backend: NvmlBackend, n: int) -> dict[str, float]:
    """`n` syncs, each after the late calls of the last have returned; what they applied or settled, merged."""
    out: dict[str, float] = {}
    for _ in range(n):
        out.update(agent.sync())
        returned(backend.reads)
    return out


def test_a_gpu_slower_than_the_deadline_is_capped_and_given_back_a_few_syncs_late():
    devs, nvml, backend, source, agent = slow_node({"GPU-1": 300.0})
    nvml.slow = "GPU-1"
    assert syncs(agent, backend, 4) == {"GPU-1": 300.0}
    assert devs[1].limit_mw == 300_000 and agent.failed is None
    source.caps = {}
    assert syncs(agent, backend, 4) == {"GPU-1": 700.0}
    assert devs[1].limit_mw == 700_000 and agent.failed is None


def test_a_gpu_capped_while_fast_and_slow_since_is_given_back():
    devs, nvml, backend, source, agent = slow_node({"GPU-1": 300.0})
    assert agent.sync() == {"GPU-1": 300.0}
    nvml.slow = "GPU-1"
    assert syncs(agent, backend, 3) == {} and devs[1].limit_mw == 300_000   # its cap in force: nothing to do
    source.caps = {}
    assert syncs(agent, backend, 4) == {"GPU-1": 700.0}
    assert devs[1].limit_mw == 700_000 and agent.failed is None


def test_a_late_limit_read_older_than_max_age_is_not_used():
    devs, nvml, backend, source, agent = slow_node({"GPU-1": 300.0})
    backend.limits_max_age_s = 0.0
    nvml.slow = "GPU-1"
    assert syncs(agent, backend, 3) == {} and devs[1].limit_mw == 700_000
    assert "could not be read" in agent.failed
