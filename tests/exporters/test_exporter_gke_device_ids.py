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
