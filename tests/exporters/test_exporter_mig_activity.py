"""SM activity per GPU instance of a MIG GPU from the (fake) NVML backend's GPM (`exporters.backends.nvml_gpm`),
published as dcgm-exporter publishes it: ``DCGM_FI_PROF_SM_ACTIVE`` with the GPU's labels plus ``GPU_I_ID`` and
``GPU_I_PROFILE``, so the rules' slice-weighted GPU figure reads our exporter and dcgm-exporter alike."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporters.backends.fake_nvml import FakeDevice, FakeMig, FakeNvml, NVMLError_NotSupported
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector

H100 = "GPU-h100h100-0000-0000-0000-000000000000"
A100 = "GPU-a100a100-0000-0000-0000-000000000001"


def node(*migs: FakeMig, arch: int = 9) -> tuple[FakeNvml, FakeDevice, CollectorRegistry]:
    gpu = FakeDevice(uuid=H100, arch=arch, migs=list(migs))
    nvml = FakeNvml([gpu, FakeDevice(uuid=A100, name="NVIDIA A100-SXM4-80GB", minor=1, arch=8, migs=[
        FakeMig("MIG-a1", gpu_instance_id=1, profile="7g.80gb")])])
    reg = CollectorRegistry()
    reg.register(GpuCollector(NvmlBackend(nvml, hostname="node-a")))
    return nvml, gpu, reg


def instances(reg: CollectorRegistry) -> dict[tuple[str, str, str], float]:
    """(UUID, GPU_I_ID, GPU_I_PROFILE) -> value of the per-instance SM activity samples of one scrape."""
    return {(s.labels["UUID"], s.labels["GPU_I_ID"], s.labels.get("GPU_I_PROFILE", "")): s.value
            for m in reg.collect() if m.name == "DCGM_FI_PROF_SM_ACTIVE" for s in m.samples if "GPU_I_ID" in s.labels}


def test_each_instance_of_a_hopper_mig_gpu_has_its_own_series_from_the_second_scrape():
    _, _, reg = node(FakeMig("MIG-1", gpu_instance_id=1, profile="3g.40gb", gpm_sm_util=80.0),
                     FakeMig("MIG-2", gpu_instance_id=2, profile="4g.40gb", gpm_sm_util=10.0))
    assert instances(reg) == {}   # GPM compares two samples: nothing on the first scrape
    assert instances(reg) == {(H100, "1", "3g.40gb"): 0.8, (H100, "2", "4g.40gb"): 0.1}
    labels = {"gpu": "0", "UUID": H100, "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
              "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a", "DCGM_FI_DRIVER_VERSION": "580.159.04",
              "GPU_I_ID": "1", "GPU_I_PROFILE": "3g.40gb"}
    assert reg.get_sample_value("DCGM_FI_PROF_SM_ACTIVE", labels) == 0.8


def test_compute_instances_of_one_gpu_instance_are_one_series_named_by_the_gpu_instance_profile():
    _, _, reg = node(FakeMig("MIG-1", gpu_instance_id=3, profile="1c.2g.20gb", gpm_sm_util=30.0),
                     FakeMig("MIG-2", gpu_instance_id=3, profile="1c.2g.20gb", compute_instance_id=1, gpm_sm_util=30.0))
    instances(reg)
    assert instances(reg) == {(H100, "3", "2g.20gb"): 0.3}


def test_an_a100_in_mig_mode_has_no_instance_series_gpm_being_hoppers_and_newer():
    _, _, reg = node()
    instances(reg)
    assert instances(reg) == {}


def test_an_instance_destroyed_loses_its_series_and_its_sample_and_a_new_one_starts_after_two_scrapes():
    nvml, gpu, reg = node(FakeMig("MIG-1", gpu_instance_id=1, profile="3g.40gb", gpm_sm_util=50.0),
                          FakeMig("MIG-2", gpu_instance_id=2, profile="3g.40gb", gpm_sm_util=20.0))
    instances(reg)
    instances(reg)
    gone = gpu.migs.pop()
    freed = nvml.calls.count("nvmlGpmSampleFree")
    assert instances(reg) == {(H100, "1", "3g.40gb"): 0.5}
    # freed: the GPU's own previous sample, instance 1's previous one, and the destroyed instance 2's last one
    assert nvml.calls.count("nvmlGpmSampleFree") == freed + 3
    new = FakeMig("MIG-3", gpu_instance_id=5, profile="1g.10gb", gpm_sm_util=90.0, parent=gpu)
    gpu.migs.append(new)
    assert (H100, "5", "1g.10gb") not in instances(reg)
    assert instances(reg)[H100, "5", "1g.10gb"] == 0.9
    assert gone.gpu_instance_id == 2


def test_an_instance_gpm_refuses_is_left_out_and_the_others_published():
    _, _, reg = node(FakeMig("MIG-1", gpu_instance_id=1, profile="3g.40gb", gpm_sm_util=None),
                     FakeMig("MIG-2", gpu_instance_id=2, profile="3g.40gb", gpm_sm_util=20.0))
    instances(reg)
    assert instances(reg) == {(H100, "2", "3g.40gb"): 0.2}


def test_a_lost_or_failing_mig_gpu_gives_no_instance_series_and_the_scrape_still_succeeds():
    _, gpu, reg = node(FakeMig("MIG-1", gpu_instance_id=1, profile="3g.40gb", gpm_sm_util=50.0))
    instances(reg)
    gpu.fail["nvmlDeviceGetMaxMigDeviceCount"] = NVMLError_NotSupported
    assert instances(reg) == {}
    del gpu.fail["nvmlDeviceGetMaxMigDeviceCount"]
    gpu.lost = True
    assert instances(reg) == {}
    assert reg.get_sample_value("DCGM_FI_DEV_XID_ERRORS", {
        "gpu": "0", "UUID": H100, "pci_bus_id": "00000000:18:00.0", "device": "nvidia0",
        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "node-a", "DCGM_FI_DRIVER_VERSION": "580.159.04",
        "err_code": "79", "err_msg": "GPU has fallen off the bus"}) == 79
