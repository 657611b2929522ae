"""A GPU that answers, but slower than the reads' deadline, is still capped and given back by the power-cap agent.

The agent's calls on a GPU run under the reads' deadline (fa5c495): a GPU whose limit read (one NVML call, three the
first time under an NVML initialisation: its default and range are asked then, `NvmlPowerCaps._constant`) always
outran it read NaN at every sync, so it was never capped, and one capped while fast and slow since was never given
back (audit s33a8, p8_slow / p8b_slow_giveback); the agent before fa5c495, with no deadline, capped it. A limit read
that missed its deadline is now used at the next sync once it has returned (`NvmlPowerCaps.power_limits`), if it
began at most two agent intervals ago (`limits_max_age_s`) and no Set was made on the GPU since: such a GPU is capped
or given back a sync or two late, not never. Its late Set is pending and judged from what it returned (`returned_sets`).

The slow GPU's calls are held until its sync has returned (`SlowPower.between`), then waited for (`settled`): late
whatever the load. They slept a time above the deadline, but a test whose reads' clock is a fake one (it does not
move while a call waits) waits each GPU's job a whole deadline after the one before, so a fast GPU slow to be
scheduled gave the slow GPU's 50 ms calls 0.2 s: read in time, and capped in a test saying it never is."""

from __future__ import annotations

import threading
import time

import pytest

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapAgent
from tests.exporters.test_exporter_power_cap_stuck_gpu import BOUND_S, Caps

DEADLINE_S = 0.1


class SlowPower(FakeNvml):
    """Every power-limit call on the GPU `slow` waits until `between` is set (by `sync`, once the sync has returned;
    at most `BOUND_S`): never back within its sync's deadline, back before the next sync."""

    slow: str | None = None

    def __init__(self, devices: list[FakeDevice]) -> None:
        super().__init__(devices)
        self.between = threading.Event()

    def _dev(self, h, fn):
        if self.slow is not None and getattr(h, "target", h).uuid == self.slow and "PowerManagement" in fn:
            self.between.wait(BOUND_S)
        return super()._dev(h, fn)


def settled(backend: NvmlBackend) -> None:
    """Wait until no GPU's job is inside NVML; fails the test (rather than go on with one running) after `BOUND_S`."""
    for _ in range(int(BOUND_S * 100)):
        if not backend.reads.stuck():
            return
        time.sleep(0.01)
    pytest.fail(f"still inside NVML after {BOUND_S} s: {backend.reads.stuck()}")


def sync(agent: PowerCapAgent, backend: NvmlBackend) -> dict[str, float]:
    """One sync, the slow GPU's calls held until it has returned (so late), then let through and waited for."""
    backend.nvml.between.clear()
    try:
        return agent.sync()
    finally:
        backend.nvml.between.set()
        settled(backend)


def slow_node(caps: dict[str, float]):
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = SlowPower(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    source = Caps(caps)
    return devs, nvml, backend, source, PowerCapAgent(source, backend)


def syncs(agent: PowerCapAgent, backend: NvmlBackend, n: int) -> dict[str, float]:
    """`n` syncs (`sync`); what they applied or settled, merged."""
    out: dict[str, float] = {}
    for _ in range(n):
        out.update(sync(agent, backend))
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
