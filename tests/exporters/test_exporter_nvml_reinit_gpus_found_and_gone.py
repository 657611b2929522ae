"""The GPUs served after NVML is initialised again under a running exporter: those NVML names now, as a restarted
exporter would serve them. Before, the GPUs served at start stayed the GPUs served: one NVML no longer named was
counted as served and every field of it an error at every scrape until a restart, and one NVML found (a reload, or
a GPU reset, bringing a GPU back) was not served until a restart."""

from __future__ import annotations

from exporter_scrapes import Scrape
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_DriverNotLoaded
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector

TEMP = "DCGM_FI_DEV_GPU_TEMP"
XID = "DCGM_FI_DEV_XID_ERRORS"


def gpu(i: int) -> FakeDevice:
    return FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{0x18 + i:02X}:00.0")


def reloaded(nvml: FakeNvml, collector: GpuCollector, devices: list[FakeDevice]) -> Scrape:
    """The driver unloaded under the exporter, and loaded again with `devices`: the scrape after that."""
    nvml.broken = NVMLError_DriverNotLoaded
    Scrape(collector)
    nvml.broken, nvml.devices = None, devices
    return Scrape(collector)


def gauge(s: Scrape, name: str) -> float:
    fam = next(f for f in text_string_to_metric_families(s.text) if f.name == name)
    return fam.samples[0].value


def labels(s: Scrape, uuid: str) -> dict[str, str]:
    fam = next(f for f in text_string_to_metric_families(s.text) if f.name == TEMP)
    return next(x.labels for x in fam.samples if x.labels["UUID"] == uuid)


def test_a_gpu_gone_after_a_reload_is_no_longer_served_nor_counted_as_failing():
    devs = [gpu(0), gpu(1)]
    nvml = FakeNvml(devs)
    collector = GpuCollector(NvmlBackend(nvml, hostname="n1"))
    Scrape(collector)
    s = reloaded(nvml, collector, [devs[1]])
    errors = s.errors
    assert gauge(s, "gputide_exporter_gpus") == 1 and gauge(s, "gputide_exporter_gpus_read") == 1
    assert s.present("GPU-0") == set()
    assert labels(s, "GPU-1")["gpu"] == "0" and labels(s, "GPU-1")["device"] == "nvidia0"   # NVML's index now
    assert Scrape(collector).errors == errors   # was 21 more errors of GPU-0 at every scrape until a restart


def test_a_gpu_found_after_a_reload_is_served_with_its_labels_and_the_xids_heard_are_kept_by_uuid():
    devs = [gpu(0), gpu(1)]
    nvml = FakeNvml(devs)
    backend = NvmlBackend(nvml, hostname="n1")
    collector = GpuCollector(backend)
    nvml.push_xid(devs[1], 48)
    assert Scrape(collector).values[XID] == {"GPU-0": 0, "GPU-1": 48}
    found = gpu(2)
    s = reloaded(nvml, collector, [devs[1], found, devs[0]])   # indices moved too
    assert gauge(s, "gputide_exporter_gpus") == 3
    assert s.values[TEMP] == {"GPU-0": 45, "GPU-1": 45, "GPU-2": 45}
    assert s.values[XID] == {"GPU-0": 0, "GPU-1": 48, "GPU-2": 0}   # 48 was GPU-1's, wherever NVML counts it now
    assert labels(s, "GPU-2") == {"gpu": "1", "UUID": "GPU-2", "pci_bus_id": "00000000:1A:00.0", "device": "nvidia1",
                                  "modelName": "NVIDIA H100 80GB HBM3", "Hostname": "n1",
                                  "DCGM_FI_DRIVER_VERSION": "580.159.04"}
    assert backend.device_files == {"nvidia0": "GPU-0", "nvidia1": "GPU-1", "nvidia2": "GPU-2"}   # pod attribution
    nvml.push_xid(found, 31)
    assert Scrape(collector).values[XID]["GPU-2"] == 31   # its events are heard

