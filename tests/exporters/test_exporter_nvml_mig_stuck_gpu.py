"""Pod attribution's MIG lookups (`NvmlBackend.mig_instance`) never hang the collection (audit s32y5, B): a DRA MIG
device's GPU instance listing, or an index lookup, called NVML on a GPU whose read was stuck, in the collection's
thread under the backend's lock, and the lock was taken with no timeout behind a power-cap agent call that did not
return. A late or stuck GPU's MIG devices are now None for that scrape (no MIG attribution), asked again once its read
returns (an index on it names its GPU, with no GPU instance); a lock held past `lock_timeout_s` is None too.

Every wait is bounded: hung calls at most `BOUND_S`, the threads joined with a timeout."""

from __future__ import annotations

from exporters.backends.base import MIG_GPU_UNKNOWN, MigInstance
from exporters.backends.fake_nvml import FakeDevice, FakeMig
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from tests.exporters.test_exporter_nvml_gpu_hung import DEADLINE_S, ended
from tests.exporters.test_exporter_power_cap_stuck_gpu import BOUND_S, HungDevice, in_thread, lock_held

DRA = "gpu-0-mig-19-0-1"   # the A100's 1g.10gb instance, by placement
INDEX = "0:0"              # the same, as --device-id-strategy=index names it
FOUND = MigInstance(parent_uuid="GPU-A100", gpu_instance_id=7, profile="1g.10gb")


def backend() -> tuple[HungDevice, NvmlBackend]:
    a100 = FakeDevice(uuid="GPU-A100", name="NVIDIA A100-SXM4-80GB", minor=0, arch=8, migs=[
        FakeMig("MIG-1111", gpu_instance_id=7, profile="1g.10gb", gi_profile_id=19, placement=(0, 1))])
    nvml = HungDevice([a100, FakeDevice(uuid="GPU-H100", minor=1)])
    return nvml, NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))


def test_a_stuck_gpus_mig_devices_are_none_without_a_call_and_resolved_once_its_read_returns():
    nvml, b = backend()
    b.read()
    nvml.hung = "GPU-A100"
    try:
        b.read()
        assert b.reads.stuck() == ["GPU-A100"]
        held_whole = MigInstance("GPU-A100", None)   # the index names its GPU (test_exporter_nvml_mig_healthy_...)
        unknown = MIG_GPU_UNKNOWN   # the UUID: not on the H100, never walked (test_exporter_nvml_mig_uuids_kept...)
        for device, want in ((DRA, None), (INDEX, held_whole), ("MIG-1111", unknown)):
            t, out = in_thread(lambda device=device: b.mig_instance(device))
            assert not t.is_alive(), f"the MIG lookup of {device} hung on the stuck GPU"
            assert out == {"result": want}
    finally:
        nvml.release.set()
    ended()
    b.read()
    assert [b.mig_instance(d) for d in (DRA, INDEX, "MIG-1111")] == [FOUND, FOUND, FOUND]


def test_a_mig_lookup_waits_for_an_agent_call_that_does_not_return_at_most_lock_timeout_s():
    _, b = backend()
    b.lock_timeout_s = 0.2
    b.read()
    agent, release = lock_held(b)   # an agent's NVML call that does not return
    try:
        t, out = in_thread(lambda: [b.mig_instance(INDEX), b.mig_instance(DRA)])
        assert not t.is_alive(), "the MIG lookup waited on the lock for good"
        assert out == {"result": [None, None]}
    finally:
        release.set()
    agent.join(BOUND_S)
    b.read()
    assert b.mig_instance(INDEX) == FOUND
