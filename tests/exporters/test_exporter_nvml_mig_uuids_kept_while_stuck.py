"""While a GPU is stuck in NVML, a pod on one of its MIG devices is still attributed where a walk saw the device, and
one that cannot be is not called "on no GPU of this node" (audit s32y11, case 3): a9ca21e looked a MIG UUID first seen
while a GPU was stuck for on the other GPUs only and counted a pod it could not place in
gputide_pod_resources_unmatched_devices (its instance read as free). Every MIG device a walk finds is kept across
collections (forgotten when its GPU is walked again without it), and a UUID still unknown is counted in
gputide_pod_resources_unresolved_mig_devices, not unmatched. Walks run only while some GPU is stuck: with none,
NVML is asked for the UUID alone (audit s32y12: a walk at each collection for a UUID that stays unknown, a finished
pod the kubelet still lists, cost 234 NVML calls under the lock against 2 on 8 A100s).

Every wait is bounded: hung calls at most `BOUND_S`, the threads joined with a timeout."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporters.backends.base import MIG_GPU_UNKNOWN, MigInstance
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


def test_a_stuck_gpus_instances_asked_before_still_resolve_and_an_unknown_uuid_is_unresolved_not_unmatched():
    nvml, _, b = node()
    kubelet = Kubelet(("ml", "old", "nvidia.com/mig-1g.10gb", "MIG-BBBB"), ("ml", "onA", "nvidia.com/mig-1g.10gb",
                                                                             "MIG-A2"))
    att = PodAttribution(kubelet)
    reg = CollectorRegistry()
    reg.register(att)
    read = Attributed(b, att).read
    assert [w.pod for w in read().workloads] == ["old", "onA"]   # healthy: each UUID asked of NVML once, kept
    walks = nvml.calls.count("nvmlDeviceGetMaxMigDeviceCount")
    nvml.hung = "GPU-A"
    kubelet.allocations += Kubelet(("ml", "unseen", "nvidia.com/mig-1g.10gb", "MIG-NEW")).allocations   # never seen
    try:
        t, out = in_thread(read)
        assert not t.is_alive(), "the collection hung on the stuck GPU"
        assert b.reads.stuck() == ["GPU-A"]
        rows = [(w.uuid, w.pod, w.gpu_instance_id) for w in out["result"].workloads]
        assert rows == [("GPU-B", "old", "9"), ("GPU-A", "onA", "8")]
        assert reg.get_sample_value("gputide_pod_resources_unmatched_devices") == 0
        assert reg.get_sample_value("gputide_pod_resources_unresolved_mig_devices") == 1   # MIG-NEW: its GPU unknown
        assert nvml.calls.count("nvmlDeviceGetMaxMigDeviceCount") > walks   # walked, GPU-B only, for MIG-NEW
    finally:
        nvml.release.set()
    ended()


def test_with_no_gpu_stuck_a_uuid_that_stays_unknown_is_asked_of_nvml_alone_at_each_collection():
    nvml, _, b = node()
    for _ in range(3):
        b.read()
        assert b.mig_instance("MIG-GONE") is None   # a finished pod's instance, destroyed
    assert nvml.calls.count("nvmlDeviceGetMaxMigDeviceCount") == 0   # no walk of every GPU's MIG devices
    assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == 3


def test_a_walk_forgets_the_uuids_its_gpu_no_longer_has():
    nvml, gpu_b, b = node()
    nvml.hung = "GPU-A"
    try:
        t, _ = in_thread(b.read)
        assert not t.is_alive() and b.reads.stuck() == ["GPU-A"]
        assert b.mig_instance("MIG-CCCC") == MigInstance("GPU-B", 11, "1g.10gb")   # walked: GPU-B's UUIDs kept
        new = FakeMig("MIG-EEEE", gpu_instance_id=11)   # re-partitioned: MIG-CCCC destroyed, its GPU instance reused
        new.parent = gpu_b
        gpu_b.migs[1] = new
        t, _ = in_thread(b.read)
        assert not t.is_alive()
        assert b.mig_instance("MIG-EEEE") == MigInstance("GPU-B", 11, "1g.10gb")   # a new UUID: GPU-B walked again
        assert b.mig_instance("MIG-CCCC") is MIG_GPU_UNKNOWN   # forgotten by that walk: not GPU-B's instance 11
        assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == 0   # NVML's lookup would ask the stuck GPU too
    finally:
        nvml.release.set()
    ended()
