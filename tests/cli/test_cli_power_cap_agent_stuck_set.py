"""`gputide power-cap-agent`'s liveness with a power-limit Set that never returns (a GPU in recovery).

The agent's NVML calls on a GPU run in that GPU's own job with the reads' deadline (fa5c495): a Set that never
returns leaves its sync ending (the Set pending, the GPU stuck), so the loop kept beating, /healthz never failed and
the kubelet never restarted the agent (audit s33a8, p1_standalone_stuck), where one before it hung the sync and was
restarted. Its calls now run inside `AgentHealth.watching` (`watch_nvml`): one inside NVML past the stall limit fails
liveness. Bounded: the hung Set waits at most `BOUND_S`."""

from __future__ import annotations

import threading
import time

from prometheus_client import CollectorRegistry

from balancer.cmd.power_cap_agent import AgentHealth, AgentMetrics, run_agent, watch_nvml
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapAgent

BOUND_S, STALL_S = 10.0, 1.0


class HungSet(FakeNvml):
    """GPU-1's power-limit Set blocks until `release` (at most `BOUND_S`) once `hung`."""

    hung = False
    release = threading.Event()

    def _dev(self, h, fn):
        if self.hung and fn == "nvmlDeviceSetPowerManagementLimit" and getattr(h, "target", h).uuid == "GPU-1":
            self.release.wait(BOUND_S)
        return super()._dev(h, fn)


class Caps:
    def read(self):
        return {"GPU-1": 300.0}


def test_a_power_limit_set_that_never_returns_fails_liveness_after_the_stall_limit():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = HungSet(devs)
    nvml.release = threading.Event()
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(0.1))
    backend.read()
    health = AgentHealth(STALL_S)
    watch_nvml(backend, health)
    agent = PowerCapAgent(Caps(), backend)
    nvml.hung = True
    stop = threading.Event()
    loop = threading.Thread(target=run_agent, args=(agent, AgentMetrics(CollectorRegistry()), 0.1, stop),
                            kwargs={"beat": health.beat}, daemon=True)
    loop.start()
    try:
        time.sleep(STALL_S / 2)
        assert health.live()[0] and health.ready()[0]   # pending, its sync ended: not stuck yet
        time.sleep(STALL_S)
        ok, why = health.live()
        assert not ok, why
        assert "GPU GPU-1's power-limit Set" in why
        assert not health.ready()[0]
        assert loop.is_alive()   # the loop itself still beats
    finally:
        stop.set()
        nvml.release.set()
        loop.join(BOUND_S)
    for _ in range(int(BOUND_S * 100)):
        if not backend.reads.stuck():
            break
        time.sleep(0.01)
    assert health.live()[0]   # returned: live again


def test_the_standalone_agent_uses_a_late_limit_read_up_to_the_next_sync_at_its_interval():
    """A slow GPU's late limit read is used at the next sync (`NvmlPowerCaps.power_limits`) if no older than the
    agent's two intervals: at a 60 s interval, the reads' 30 s default dropped it at every sync (never capped). The
    reads' own `max_age_s` (when a call counts as stuck) is left as it is."""
    backend = NvmlBackend(HungSet([FakeDevice(uuid="GPU-0", minor=0)]), hostname="n1", reads=GpuReads(0.1))
    watch_nvml(backend, AgentHealth(STALL_S), 60.0)
    assert backend.limits_max_age_s == 120.0 and backend.reads.max_age_s == 30.0
