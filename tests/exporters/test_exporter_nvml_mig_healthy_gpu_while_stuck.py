"""While a GPU is stuck in NVML, pods on MIG devices are still attributed (audit s32y7, p3): 54c6ef0 made every MIG
UUID not resolved before None while any GPU was stuck (``nvmlDeviceGetHandleByUUID`` may ask the stuck GPU too), so a
pod started on a healthy GPU's MIG device then went unattributed until the stuck GPU returned (maybe a reboot), and a
device plugin's index on the stuck GPU dropped its pod. Now such a UUID is looked for among the MIG devices of the
GPUs not stuck, and an index on the stuck GPU holds its GPU whole (as a DRA MIG device not resolved).

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


def node() -> tuple[HungDevice, NvmlBackend]:
    """Two A100s in MIG mode: GPU-A (MIG-AAAA), GPU-B (MIG-BBBB, MIG-CCCC); GPU-A stuck from its second read."""
    a = FakeDevice(uuid="GPU-A", name="NVIDIA A100-SXM4-80GB", minor=0, arch=8,
                   migs=[FakeMig("MIG-AAAA", gpu_instance_id=7)])
    b = FakeDevice(uuid="GPU-B", name="NVIDIA A100-SXM4-80GB", minor=1, arch=8,
                   migs=[FakeMig("MIG-BBBB", gpu_instance_id=9), FakeMig("MIG-CCCC", gpu_instance_id=11)])
    nvml = HungDevice([a, b])
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    nvml.hung = "GPU-A"
    return nvml, backend


def test_a_mig_uuid_first_seen_while_a_gpu_is_stuck_is_resolved_on_the_others_without_asking_the_stuck_one():
    nvml, b = node()
    try:
        b.read()
        assert b.reads.stuck() == ["GPU-A"]
        asked = len(nvml.asked)
        t, out = in_thread(lambda: [b.mig_instance(d) for d in ("MIG-CCCC", "MIG-AAAA", "MIG-BBBB")])
        assert not t.is_alive(), "a MIG UUID lookup asked the stuck GPU"
        assert out == {"result": [MigInstance("GPU-B", 11, "1g.10gb"), MIG_GPU_UNKNOWN,   # never walked on GPU-A
                                  MigInstance("GPU-B", 9, "1g.10gb")]}
        assert all(uuid != "GPU-A" for _, uuid in nvml.asked[asked:])
        assert b.mig_instance("0:0") == MigInstance("GPU-A", None)   # the index names GPU-A: no instance asked
    finally:
        nvml.release.set()
    ended()
    b.read()
    assert b.mig_instance("MIG-AAAA") == MigInstance("GPU-A", 7, "1g.10gb")   # looked for again once not stuck


def test_pods_are_attributed_while_a_gpu_is_stuck_an_index_on_it_to_the_whole_gpu():
    nvml, b = node()
    kubelet = Kubelet(("ml", "new", "nvidia.com/mig-1g.10gb", "MIG-CCCC"), ("ml", "onA", "nvidia.com/gpu", "0:0"))
    att = PodAttribution(kubelet)
    reg = CollectorRegistry()
    reg.register(att)
    try:
        t, out = in_thread(Attributed(b, att).read)
        assert not t.is_alive()
        rows = [(w.uuid, w.pod, w.gpu_instance_id) for w in out["result"].workloads]
        assert rows == [("GPU-B", "new", "11"), ("GPU-A", "onA", "")]
        assert reg.get_sample_value("gputide_pod_resources_unresolved_mig_devices") == 1
        assert reg.get_sample_value("gputide_pod_resources_unmatched_devices") == 0
    finally:
        nvml.release.set()
    ended()
