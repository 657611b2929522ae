"""While a GPU is stuck in NVML, a pod on one of its MIG devices is still attributed, and one that cannot be is not
called "on no GPU of this node" (audit s32y11, case 3): a9ca21e looked a MIG UUID first seen while a GPU was stuck
for on the other GPUs only, so a pod that started on an instance of the stuck GPU made before the hang was left out
of the rows (its instance read as free) and counted in gputide_pod_resources_unmatched_devices. Now every MIG device
a walk finds is kept across collections (forgotten when its GPU is walked again without it), so that instance still
resolves; a UUID still unknown is counted in gputide_pod_resources_unresolved_mig_devices, not unmatched.

Every wait is bounded: hung calls at most `BOUND_S`, the threads joined with a timeout."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporters.backends.base import MigInstance
from exporters.backends.fake_nvml import FakeDevice, FakeMig
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.podresources import Attributed, PodAttribution
from tests.exporters.test_exporter_mig_attribution import Kubelet
from tests.exporters.test_exporter_nvml_gpu_hung import DEADLINE_S, ended
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread


def node() -> tuple[HungDevice, FakeDevice, NvmlBackend]:
    """Two A100s in MIG mode: GPU-A (MIG-AAAA, MIG-A2), GPU-B (MIG-BBBB, MIG-CCCC)."""
    a = FakeDevice(uuid="GPU-A", name="NVIDIA A100-SXM4-80GB", minor=0, arch=8,
                   migs=[FakeMig("MIG-AAAA", gpu_instance_id=7), FakeMig("MIG-A2", gpu_instance_id=8)])
    b = FakeDevice(uuid="GPU-B", name="NVIDIA A100-SXM4-80GB", minor=1, arch=8,
                   migs=[FakeMig("MIG-BBBB", gpu_instance_id=9), FakeMig("MIG-CCCC", gpu_instance_id=11)])
    nvml = HungDevice([a, b])
    return nvml, b, NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))


def test_a_stuck_gpus_instances_walked_before_still_resolve_and_an_unknown_uuid_is_unresolved_not_unmatched():
    nvml, _, b = node()
    kubelet = Kubelet(("ml", "old", "nvidia.com/mig-1g.10gb", "MIG-BBBB"))
    att = PodAttribution(kubelet)
    reg = CollectorRegistry()
    reg.register(att)
    read = Attributed(b, att).read
    assert [w.pod for w in read().workloads] == ["old"]   # healthy: MIG-BBBB new, every GPU walked
    nvml.hung = "GPU-A"
    kubelet.allocations += Kubelet(("ml", "onA", "nvidia.com/mig-1g.10gb", "MIG-A2"),   # made before the hang
                                   ("ml", "unseen", "nvidia.com/mig-1g.10gb", "MIG-NEW")).allocations   # never walked
    try:
        t, out = in_thread(read)
        assert not t.is_alive(), "the collection hung on the stuck GPU"
        assert b.reads.stuck() == ["GPU-A"]
        rows = [(w.uuid, w.pod, w.gpu_instance_id) for w in out["result"].workloads]
        assert rows == [("GPU-B", "old", "9"), ("GPU-A", "onA", "8")]
        assert reg.get_sample_value("gputide_pod_resources_unmatched_devices") == 0
        assert reg.get_sample_value("gputide_pod_resources_unresolved_mig_devices") == 1   # MIG-NEW: its GPU unknown
    finally:
        nvml.release.set()
    ended()


def test_a_walk_forgets_the_uuids_its_gpu_no_longer_has():
    nvml, gpu_b, b = node()
    b.read()
    assert b.mig_instance("MIG-CCCC") == MigInstance("GPU-B", 11, "1g.10gb")   # walked: every GPU's UUIDs kept
    asked = nvml.calls.count("nvmlDeviceGetHandleByUUID")
    new = FakeMig("MIG-EEEE", gpu_instance_id=11)   # re-partitioned: MIG-CCCC destroyed, its GPU instance ID reused
    new.parent = gpu_b
    gpu_b.migs[1] = new
    b.read()
    assert b.mig_instance("MIG-EEEE") == MigInstance("GPU-B", 11, "1g.10gb")   # a new UUID: GPU-B walked again
    assert b.mig_instance("MIG-CCCC") is None   # forgotten by that walk, and NVML no longer knows it
    assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == asked + 1
