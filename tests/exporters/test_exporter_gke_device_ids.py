"""GKE's device plugin names GPUs by their device file, not their UUID: a whole GPU is `nvidia<n>`, a time-shared
one `nvidia<n>/vgpu<k>`, a MIG instance `nvidia<n>/gi<g>` (shared: `nvidia<n>/gi<g>/vgpu<k>`). dcgm-exporter maps
them to the GPU whose `device` label is `nvidia<n>` (`--kubernetes-gpu-id-type=device-name`); so must gputide."""

from __future__ import annotations

from exporters.backends.base import GpuIdentity
from exporters.podresources import Allocation, PodAttribution

GPUS = tuple(GpuIdentity(str(i), f"GPU-{i}aaa", f"0000:{i:02x}:00.0", f"nvidia{i}", "NVIDIA L4", "gke-node")
             for i in range(3))


class Kubelet:
    def __init__(self, *allocations: tuple[str, str]) -> None:
        self.allocations = [Allocation("ml", pod, "main", "nvidia.com/gpu", dev) for pod, dev in allocations]

    def list(self) -> list[Allocation]:
        return self.allocations


def test_gke_whole_and_time_shared_gpus_are_attributed_by_device_name():
    att = PodAttribution(Kubelet(("a", "nvidia0"), ("b", "nvidia1/vgpu0"), ("c", "nvidia1/vgpu3"),
                                 ("d", "nvidia2/gi1/vgpu0"), ("e", "nvidia7")))
    got = {(w.uuid, w.pod, w.gpu_instance_id) for w in att.workloads(GPUS)}
    assert got == {("GPU-0aaa", "a", ""), ("GPU-1aaa", "b", ""), ("GPU-1aaa", "c", ""), ("GPU-2aaa", "d", "1")}
    assert att._unmatched == 1   # nvidia7: not a GPU of this node


def test_gke_device_names_are_the_gpus_device_files_not_their_indices():
    """`nvidia<n>` is /dev/nvidia<n>, the GPU's minor number, which need not be its NVML index (the `device` label):
    on a node where they differ the pod was attributed to another GPU."""
    from exporters.backends.fake_nvml import FakeDevice, FakeNvml
    from exporters.backends.nvml import NvmlBackend
    from exporters.podresources import Attributed

    first, second = "GPU-aaaa0000-0000-0000-0000-000000000000", "GPU-bbbb0000-0000-0000-0000-000000000001"
    backend = NvmlBackend(FakeNvml([FakeDevice(uuid=first, minor=1), FakeDevice(uuid=second, minor=0)]),
                          hostname="gke-node")
    att = PodAttribution(Kubelet(("a", "nvidia0"), ("b", "nvidia1/vgpu2")))
    got = {(w.pod, w.uuid) for w in Attributed(backend, att).read().workloads}
    assert got == {("a", second), ("b", first)}
