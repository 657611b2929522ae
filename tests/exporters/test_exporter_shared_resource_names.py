"""NVIDIA's device plugin with time-slicing or MPS and `renameByDefault: true` advertises a shared GPU as
`nvidia.com/gpu.shared` (a shared MIG device as `nvidia.com/mig-<profile>.shared`), so that pods can ask for a
shared or a dedicated GPU by name: the pods holding them are on those GPUs as much as those of `nvidia.com/gpu`."""

from __future__ import annotations

from exporters.backends.base import GpuIdentity
from exporters.podresources import Allocation, PodAttribution

A100 = "GPU-a100a100-0000-0000-0000-000000000000"
GPUS = (GpuIdentity("0", A100, "0000:01:00.0", "nvidia0", "NVIDIA A100-SXM4-80GB", "node-a"),
        GpuIdentity("1", "GPU-1aaa", "0000:02:00.0", "nvidia1", "NVIDIA H100 80GB HBM3", "node-a"))


class Kubelet:
    def __init__(self, *allocations: tuple[str, str, str]) -> None:
        self.allocations = [Allocation("ml", pod, "main", res, dev) for pod, res, dev in allocations]

    def list(self) -> list[Allocation]:
        return self.allocations


def test_renamed_shared_gpus_are_attributed_and_a_shared_mig_profile_is_the_instances():
    att = PodAttribution(Kubelet(("a", "nvidia.com/gpu.shared", "GPU-1aaa::0"),
                                 ("b", "nvidia.com/gpu.shared", "GPU-1aaa::1"),
                                 ("c", "nvidia.com/mig-2g.20gb.shared", f"MIG-{A100}/3/0::0")))
    got = {(w.uuid, w.pod, w.gpu_instance_id, w.gpu_instance_profile) for w in att.workloads(GPUS)}
    assert got == {("GPU-1aaa", "a", "", ""), ("GPU-1aaa", "b", "", ""), (A100, "c", "3", "2g.20gb")}
