"""A GPU that fell off the bus (NVML's GpuIsLost) and answers again: its XID read 79 ("fallen off the bus") at every
scrape until the exporter restarted, though every other field was read again, so the controller kept a working GPU
out of new work. Now its next good read clears it: the XID is the last one heard again."""

from __future__ import annotations

from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector

XID = "DCGM_FI_DEV_XID_ERRORS"


def test_a_lost_gpu_that_answers_again_has_its_last_heard_xid_again():
    devs = [FakeDevice(uuid="GPU-0", minor=0), FakeDevice(uuid="GPU-1", minor=1), FakeDevice(uuid="GPU-2", minor=2)]
    nvml = FakeNvml(devs)
    collector = GpuCollector(NvmlBackend(nvml, hostname="n1"))
    nvml.push_xid(devs[2], 48)
    assert Scrape(collector).values[XID] == {"GPU-0": 0, "GPU-1": 0, "GPU-2": 48}
    devs[1].lost = devs[2].lost = True
    for _ in range(2):
        assert Scrape(collector).values[XID] == {"GPU-0": 0, "GPU-1": 79, "GPU-2": 79}
    devs[1].lost = devs[2].lost = False
    s = Scrape(collector)
    assert s.values[XID] == {"GPU-0": 0, "GPU-1": 0, "GPU-2": 48}   # was 79 for both until a restart
    assert s.present("GPU-1") == s.present("GPU-0")
    nvml.push_xid(devs[1], 31)
    assert Scrape(collector).values[XID]["GPU-1"] == 31


def test_an_xid_79_nvml_delivers_stays_after_the_gpu_answers_again():
    devs = [FakeDevice(uuid="GPU-0", minor=0)]
    nvml = FakeNvml(devs)
    collector = GpuCollector(NvmlBackend(nvml))
    nvml.push_xid(devs[0], 79)   # heard: NVML said so, not only the exporter's read
    assert Scrape(collector).values[XID] == {"GPU-0": 79}
    devs[0].lost = True
    assert Scrape(collector).values[XID] == {"GPU-0": 79}
    devs[0].lost = False
    assert Scrape(collector).values[XID] == {"GPU-0": 79}
