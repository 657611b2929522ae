"""A GPU whose XID events NVML will not deliver has no DCGM_FI_DEV_XID_ERRORS series, never a 0 ("no XID").

The controller keeps a GPU that lacks the XID series the rest of the fleet publishes from new work (its health is
unknown); a 0 read it as healthy however many XIDs it had.
"""

from __future__ import annotations

from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission, NVMLError_NotSupported
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector

XID = "DCGM_FI_DEV_XID_ERRORS"


def _fake(**fail) -> tuple[FakeNvml, list[FakeDevice]]:
    devs = [FakeDevice(uuid="GPU-0", minor=0, fail=dict(fail)), FakeDevice(uuid="GPU-1", minor=1)]
    return FakeNvml(devs), devs


def test_a_gpu_without_xid_events_has_no_xid_series_and_declares_it_unsupported():
    nvml, devs = _fake(nvmlDeviceRegisterEvents=NVMLError_NotSupported)
    collector = GpuCollector(NvmlBackend(nvml))
    for _ in range(2):
        s = Scrape(collector)
        assert s.values[XID] == {"GPU-1": 0}
        assert s.lacks("GPU-0") >= {XID} and XID not in s.failed("GPU-0")
        assert s.present("GPU-1") >= {XID} and not s.lacks("GPU-1") & {XID}
    assert nvml.calls.count("nvmlDeviceRegisterEvents") == 2   # NotSupported is for good: asked once per GPU


def test_a_refused_registration_is_a_collect_error_until_it_succeeds_then_xids_are_heard():
    nvml, devs = _fake(nvmlDeviceRegisterEvents=NVMLError_NoPermission)
    collector = GpuCollector(NvmlBackend(nvml))
    s = Scrape(collector)
    assert s.values[XID] == {"GPU-1": 0}
    assert XID in s.failed("GPU-0") and XID not in s.lacks("GPU-0")
    del devs[0].fail["nvmlDeviceRegisterEvents"]
    s = Scrape(collector)
    assert s.values[XID] == {"GPU-0": 0, "GPU-1": 0}
    nvml.push_xid(devs[0], 48)
    assert Scrape(collector).values[XID] == {"GPU-0": 48, "GPU-1": 0}


def test_no_event_set_means_no_xid_series_for_any_gpu():
    def refuse():
        raise NVMLError_NotSupported()

    nvml, devs = _fake()
    nvml.nvmlEventSetCreate = refuse
    s = Scrape(GpuCollector(NvmlBackend(nvml)))
    assert s.values[XID] == {}
    assert all(XID in s.lacks(d.uuid) and XID not in s.failed(d.uuid) for d in devs)


def test_a_gpu_fallen_off_the_bus_reads_79_even_where_its_events_were_not_heard():
    nvml, devs = _fake(nvmlDeviceRegisterEvents=NVMLError_NotSupported)
    collector = GpuCollector(NvmlBackend(nvml))
    Scrape(collector)
    devs[0].lost = True
    s = Scrape(collector)
    assert s.values[XID] == {"GPU-0": 79, "GPU-1": 0}
    assert XID not in s.failed("GPU-0")
