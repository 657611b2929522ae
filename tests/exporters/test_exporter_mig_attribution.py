"""Pods on MIG devices, from the kubelet's PodResources answer, attributed to the GPU they are carved from with
dcgm-exporter's GPU_I_ID and GPU_I_PROFILE: both MIG strategies of NVIDIA's device plugin, every ID form it uses,
MIG devices resolved through the (fake) NVML backend."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from exporters.backends.fake_nvml import FakeDevice, FakeMig, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector
from exporters.podresources import Allocation, Attributed, PodAttribution

A100 = "GPU-a100a100-0000-0000-0000-000000000000"
H100 = "GPU-h100h100-0000-0000-0000-000000000001"


class Kubelet:
    """A PodResources client that answers `allocations` (namespace, pod, resource, device id)."""

    def __init__(self, *allocations: tuple[str, str, str, str]) -> None:
        self.allocations = [Allocation(ns, pod, "main", res, dev) for ns, pod, res, dev in allocations]

    def list(self) -> list[Allocation]:
        return self.allocations


def _node() -> tuple[FakeNvml, NvmlBackend]:
    """GPU 0: an A100 in MIG mode (two 1g.10gb and a 3g.40gb instance, one a compute instance 1c.3g.40gb), GPU 1: a
    whole H100."""
    a100 = FakeDevice(uuid=A100, name="NVIDIA A100-SXM4-80GB", minor=0, arch=8, migs=[
        FakeMig("MIG-1111", gpu_instance_id=7, profile="1g.10gb"),
        FakeMig("MIG-2222", gpu_instance_id=8, profile="1g.10gb"),
        FakeMig("MIG-3333", gpu_instance_id=2, profile="1c.3g.40gb")])
    nvml = FakeNvml([a100, FakeDevice(uuid=H100, minor=1)])
    return nvml, NvmlBackend(nvml, hostname="node-a")


def _rows(kubelet: Kubelet) -> tuple[set[tuple[tuple[str, str], ...]], float]:
    nvml, backend = _node()
    att = PodAttribution(kubelet)
    reg = CollectorRegistry()
    reg.register(GpuCollector(Attributed(backend, att)))
    reg.register(att)
    rows = {tuple(sorted(s.labels.items())) for m in reg.collect() if m.name == "gputide_gpu_workload_info"
            for s in m.samples}
    return rows, reg.get_sample_value("gputide_pod_resources_unmatched_devices")


def row(uuid: str, pod: str, gi: str = "", profile: str = "", namespace: str = "ml") -> tuple[tuple[str, str], ...]:
    labels = {"UUID": uuid, "namespace": namespace, "pod": pod, "workload_class": "unknown"}
    labels |= {"GPU_I_ID": gi} if gi else {}
    labels |= {"GPU_I_PROFILE": profile} if profile else {}
    return tuple(sorted(labels.items()))


@pytest.mark.parametrize(("allocations", "expected"), [
    ([("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-1111"), ("ml", "b", "nvidia.com/mig-1g.10gb", "MIG-2222"),
      ("ml", "c", "nvidia.com/mig-3g.40gb", "MIG-3333"), ("ml", "d", "nvidia.com/gpu", H100)],
     {row(A100, "a", "7", "1g.10gb"), row(A100, "b", "8", "1g.10gb"), row(A100, "c", "2", "3g.40gb"), row(H100, "d")}),
    ([("ml", "a", "nvidia.com/gpu", "MIG-1111"), ("ml", "b", "nvidia.com/gpu", "MIG-3333")],
     {row(A100, "a", "7", "1g.10gb"), row(A100, "b", "2", "3g.40gb")}),
    ([("ml", "a", "nvidia.com/gpu", "0:0"), ("ml", "b", "nvidia.com/mig-1g.10gb", "0:1")],
     {row(A100, "a", "7", "1g.10gb"), row(A100, "b", "8", "1g.10gb")}),
    ([("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-1111::0"), ("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-1111::1"),
      ("ml", "b", "nvidia.com/mig-1g.10gb", "MIG-1111::2")],
     {row(A100, "a", "7", "1g.10gb"), row(A100, "b", "7", "1g.10gb")}),
    ([("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-1111"), ("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-2222")],
     {row(A100, "a", "7", "1g.10gb"), row(A100, "a", "8", "1g.10gb")}),
    ([("ml", "a", "nvidia.com/mig-2g.20gb", f"MIG-{A100}/3/0"), ("ml", "b", "nvidia.com/gpu", f"MIG-{A100}/4/0")],
     {row(A100, "a", "3", "2g.20gb"), row(A100, "b", "4")}),
    ([("ml", "a", "nvidia.com/gpu", "nvidia0/gi7")], {row(A100, "a", "7")}),
], ids=["strategy mixed: nvidia.com/mig-<profile>, MIG UUIDs, beside a whole GPU",
        "strategy single: nvidia.com/gpu, MIG UUIDs, the profile from NVML",
        "device-id-strategy index: <gpu>:<mig>",
        "a time-sliced MIG device: one row per pod",
        "one pod on two instances of one GPU: a row per instance",
        "drivers R450/R460: MIG-<GPU UUID>/<GI>/<CI>, the profile from the resource name",
        "GKE: nvidia<minor>/gi<GI>"])
def test_pods_on_mig_devices_are_attributed_to_their_gpu_and_gpu_instance(allocations, expected):
    rows, unmatched = _rows(Kubelet(*allocations))
    assert rows == expected
    assert unmatched == 0


def test_mig_devices_nvml_does_not_know_are_counted_unmatched_and_whole_gpus_still_attributed():
    rows, unmatched = _rows(Kubelet(("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-9999"),
                                    ("ml", "b", "nvidia.com/gpu", "5:0"),
                                    ("ml", "c", "nvidia.com/mig-1g.10gb", "MIG-GPU-elsewhere/1/0"),
                                    ("ml", "d", "nvidia.com/gpu", H100),
                                    ("ml", "e", "example.com/mig-fpga", "MIG-1111")))   # not a GPU resource
    assert rows == {row(H100, "d")}
    assert unmatched == 3


def test_a_mig_uuid_is_asked_of_nvml_once_and_an_index_every_scrape():
    nvml, backend = _node()
    kubelet = Kubelet(("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-1111"), ("ml", "b", "nvidia.com/gpu", "0:1"))
    attributed = Attributed(backend, PodAttribution(kubelet))
    for _ in range(3):
        workloads = attributed.read().workloads
    assert [(w.pod, w.gpu_instance_id) for w in workloads] == [("a", "7"), ("b", "8")]
    assert nvml.calls.count("nvmlDeviceGetHandleByUUID") == 1   # a MIG UUID names one instance for its life
    assert nvml.calls.count("nvmlDeviceGetMigDeviceHandleByIndex") == 3   # re-partitioning reuses an index


def test_without_a_backend_that_resolves_mig_a_mig_uuid_is_unmatched():
    att = PodAttribution(Kubelet(("ml", "a", "nvidia.com/mig-1g.10gb", "MIG-1111")))
    nvml, backend = _node()
    assert att.workloads(backend.identity) == ()
    reg = CollectorRegistry()
    reg.register(att)
    assert reg.get_sample_value("gputide_pod_resources_unmatched_devices") == 1
