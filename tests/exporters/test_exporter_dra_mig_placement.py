"""A MIG device NVIDIA's DRA driver allocates (`gpu-<minor>-mig-<GI profile id>-<placement start>-<placement size>`)
is attributed to its GPU instance: the NVML backend lists the GPU's instances by placement (the fake NVML's
`FakeMig.gi_profile_id` / `placement`) and the pod's `gputide_gpu_workload_info` row carries GPU_I_ID and
GPU_I_PROFILE as a device plugin's MIG device's does. What NVML cannot resolve stays held on the whole GPU, counted
in `gputide_pod_resources_unresolved_mig_devices` and logged once. Verified against the fake NVML only."""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from exporters.backends.fake_nvml import (
    FakeDevice,
    FakeMig,
    FakeNvml,
    NVMLError_NoPermission,
    NVMLError_NotSupported,
)
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector
from exporters.podresources import Allocation, Attributed, PodAttribution

A100 = "GPU-a100a100-0000-0000-0000-000000000000"
H100 = "GPU-h100h100-0000-0000-0000-000000000001"


class Kubelet:
    """A PodResources client answering (pod, device, resource[, claim]): a claim makes it a DRA allocation."""

    def __init__(self, *allocations: tuple[str, ...]) -> None:
        self.allocations = [Allocation("ml", a[0], "main", a[2], a[1], a[3] if len(a) > 3 else "") for a in allocations]

    def list(self) -> list[Allocation]:
        return self.allocations


def dra(pod: str, name: str) -> tuple[str, ...]:
    return (pod, name, "gpu.nvidia.com", f"ml/{pod}-gpu")


def a100(minor: int = 0) -> FakeDevice:
    """An A100 in MIG mode: 1g.10gb instances (profile 19) at slices 0 and 1, a 3g.40gb (profile 9) at slices 4-7
    whose MIG device is a compute instance (1c.3g.40gb)."""
    return FakeDevice(uuid=A100, name="NVIDIA A100-SXM4-80GB", minor=minor, arch=8, migs=[
        FakeMig("MIG-1111", gpu_instance_id=7, profile="1g.10gb", gi_profile_id=19, placement=(0, 1)),
        FakeMig("MIG-2222", gpu_instance_id=8, profile="1g.10gb", gi_profile_id=19, placement=(1, 1)),
        FakeMig("MIG-3333", gpu_instance_id=2, profile="1c.3g.40gb", gi_profile_id=9, placement=(4, 4))])


class Node:
    """The exporter's registry over a fake NVML node with pod attribution from `kubelet`."""

    def __init__(self, kubelet: Kubelet, *devices: FakeDevice) -> None:
        self.nvml = FakeNvml(list(devices) or [a100(), FakeDevice(uuid=H100, minor=1)])
        self.backend = NvmlBackend(self.nvml, hostname="node-a")
        self.att = PodAttribution(kubelet)
        self.reg = CollectorRegistry()
        self.reg.register(GpuCollector(Attributed(self.backend, self.att)))
        self.reg.register(self.att)

    def rows(self) -> dict[str, dict[str, str]]:
        """One scrape: pod -> its workload_info labels (but namespace, pod, class); `health` then holds the scrape's
        gputide_pod_resources_* values."""
        families = list(self.reg.collect())
        self._health = {m.name.removeprefix("gputide_pod_resources_"): m.samples[0].value for m in families
                        if m.name.startswith("gputide_pod_resources_")}
        return {s.labels["pod"]: {k: v for k, v in s.labels.items() if k not in ("namespace", "pod", "workload_class")}
                for m in families if m.name == "gputide_gpu_workload_info" for s in m.samples}

    def health(self, name: str) -> float | None:
        return self._health.get(name)


def test_a_dra_mig_device_carries_its_gpu_instance_as_the_device_plugins_mig_device_does():
    node = Node(Kubelet(("plugin", "MIG-3333", "nvidia.com/mig-3g.40gb"), dra("claimed", "gpu-0-mig-9-4-4")))
    rows = node.rows()
    assert rows["claimed"] == {"UUID": A100, "GPU_I_ID": "2", "GPU_I_PROFILE": "3g.40gb"}
    assert rows["claimed"] == rows["plugin"]
    assert node.health("unresolved_mig_devices") == 0 and node.health("unmatched_devices") == 0


def test_two_instances_on_one_gpu_are_told_apart_by_placement_listed_once_per_collection():
    node = Node(Kubelet(dra("a", "gpu-0-mig-19-0-1"), dra("b", "gpu-0-mig-19-1-1"), dra("c", "gpu-1")))
    assert node.rows() == {"a": {"UUID": A100, "GPU_I_ID": "7", "GPU_I_PROFILE": "1g.10gb"},
                           "b": {"UUID": A100, "GPU_I_ID": "8", "GPU_I_PROFILE": "1g.10gb"},
                           "c": {"UUID": H100}}
    assert node.nvml.calls.count("nvmlGpuInstanceGetInfo") == 3   # one listing of the A100's 3 instances
    node.nvml.devices[0].migs[0].gpu_instance_id = 9   # re-created between collections: a new GPU instance ID
    assert node.rows()["a"]["GPU_I_ID"] == "9"
    assert node.nvml.calls.count("nvmlGpuInstanceGetInfo") == 6


@pytest.mark.parametrize("name", ["gpu-0-mig-19-3-1",    # no instance at slice 3
                                  "gpu-0-mig-20-0-1",    # another profile (1g.10gb+me) where a 1g.10gb lies
                                  "gpu-0-mig-9-0-4"])    # a 3g.40gb at slices 0-3: the A100's is at 4-7
def test_a_placement_no_gpu_instance_lies_at_holds_the_whole_gpu_counted_and_logged_once(name, caplog):
    node = Node(Kubelet(dra("a", name), dra("b", "gpu-0-mig-19-1-1")))
    with caplog.at_level(logging.WARNING, logger="exporters.backends.nvml_mig"):
        for _ in range(3):
            rows = node.rows()
            assert rows["a"] == {"UUID": A100}   # held whole: never free
            assert rows["b"] == {"UUID": A100, "GPU_I_ID": "8", "GPU_I_PROFILE": "1g.10gb"}
            assert node.health("unresolved_mig_devices") == 1 and node.health("unmatched_devices") == 0
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and name in logged[0] and A100 in logged[0]
    assert node.backend._mig.errors == 0


@pytest.mark.parametrize(("call", "error"), [("nvmlDeviceGetGpuInstanceById", NVMLError_NoPermission),
                                             ("nvmlDeviceGetGpuInstanceById", NVMLError_NotSupported),
                                             ("nvmlGpuInstanceGetInfo", NVMLError_NoPermission)])
def test_nvml_refusing_the_gpu_instances_holds_the_whole_gpu_counted_and_logged_once(call, error, caplog):
    """An exporter without the MIG monitor capability is refused the GPU instances: its DRA MIG pods stay on the
    whole GPU as before, the scrape and the device plugin's MIG devices are unaffected."""
    gpu = a100()
    gpu.fail[call] = error
    node = Node(Kubelet(dra("a", "gpu-0-mig-19-0-1"), dra("b", "gpu-0-mig-19-1-1"),
                        ("plugin", "MIG-2222", "nvidia.com/mig-1g.10gb")), gpu)
    with caplog.at_level(logging.WARNING, logger="exporters.backends.nvml_mig"):
        for _ in range(3):
            assert node.rows() == {"a": {"UUID": A100}, "b": {"UUID": A100},
                                   "plugin": {"UUID": A100, "GPU_I_ID": "8", "GPU_I_PROFILE": "1g.10gb"}}
            assert node.health("unresolved_mig_devices") == 2 and node.health("unmatched_devices") == 0
    assert node.backend._mig.errors == 3   # one refused listing per collection (3 scrapes), not one per device
    logged = [r.getMessage() for r in caplog.records]
    assert len(logged) == 1 and A100 in logged[0] and error.__name__ in logged[0]
    del gpu.fail[call]   # the capability granted (the exporter restarted with it): resolved at the next collection
    assert node.rows()["a"] == {"UUID": A100, "GPU_I_ID": "7", "GPU_I_PROFILE": "1g.10gb"}
    assert node.health("unresolved_mig_devices") == 0
