"""The power-cap agent the first to touch a GPU in recovery (audit s32y5, D): its power_limits() or
apply_power_caps() called NVML on a GPU no collection had found stuck yet, under the backend's lock, and the call
never returned, so the agent held the lock for good and every collection failed behind it (f2: every GPU's scrape
503). The agent's per-GPU calls now run as GPU reads do (`GpuReads.run`, the reads' deadline): one that does not
return in time leaves its GPU stuck, its limit NaN or its cap refused, and the lock free; collections serve the other
GPUs, and the GPU is asked again once its call returns.

Every wait is bounded: hung calls at most `BOUND_S`, the threads joined with a timeout."""

from __future__ import annotations

import math

from exporters.backends.fake_nvml import FakeDevice
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.power_caps import PowerCapError
from tests.exporters.test_exporter_nvml_gpu_hung import DEADLINE_S, ended
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread

TEMP = "DCGM_FI_DEV_GPU_TEMP"


def backend() -> tuple[list[FakeDevice], HungDevice, NvmlBackend]:
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    nvml = HungDevice(devs)
    b = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    b.lock_timeout_s = 0.5
    b.read()
    return devs, nvml, b


def test_power_limits_hung_on_a_gpu_no_collection_found_stuck_leaves_it_stuck_and_the_lock_free():
    _, nvml, b = backend()
    nvml.hung = "GPU-1"   # in recovery since the last collection: the agent finds it first
    try:
        t, out = in_thread(b.power_limits)
        assert not t.is_alive(), "the agent's power_limits() hung on GPU-1, holding the backend's lock"
        limits = out["result"]
        assert math.isnan(limits["GPU-1"].current_w) and limits["GPU-0"].current_w == limits["GPU-2"].current_w == 700.0
        assert b.reads.stuck() == ["GPU-1"] and not b._lock.locked()
        t, out = in_thread(b.read)   # a collection: not behind the lock, GPU-1 not read again
        assert not t.is_alive() and "error" not in out
        temp = out["result"].values[TEMP].tolist()
        assert temp[0] == temp[2] == 45 and math.isnan(temp[1])
    finally:
        nvml.release.set()
    ended()
    b.read()
    assert b.reads.stuck() == [] and b.power_limits()["GPU-1"].current_w == 700.0


def test_apply_power_caps_hung_on_a_gpu_refuses_it_sets_the_others_and_leaves_the_lock_free():
    devs, nvml, b = backend()
    b.power_limits()
    nvml.hung = "GPU-2"
    try:
        t, out = in_thread(lambda: b.apply_power_caps({"GPU-0": 300, "GPU-2": 300}))
        assert not t.is_alive(), "apply_power_caps() hung on GPU-2, holding the backend's lock"
        err = out["error"]
        assert isinstance(err, PowerCapError) and err.applied == {"GPU-0": 300.0} and "GPU-2" in err.refused
        assert b.reads.stuck() == ["GPU-2"] and not b._lock.locked()
        t, out = in_thread(lambda: b.apply_power_caps({"GPU-2": 250}))   # asked again: stuck, no call
        assert not t.is_alive() and "stuck" in out["error"].refused["GPU-2"]
    finally:
        nvml.release.set()
    ended()
    b.read()
    assert b.apply_power_caps({"GPU-2": 250}) == {"GPU-2": 250.0} and devs[2].limit_mw == 250_000
