"""A GPU whose read is late (a call hung in a GPU in recovery) keeps its XID series (audit s32y2): the backend set it
NaN with the GPU's other fields, though the XID comes from the event drain, not from the GPU's read, so the XID that
says why the GPU does not answer (119, a GSP timeout, heard by the drain) was hidden, and a GPU at 79 (fallen off the
bus) whose next read hung lost its 79.

Real time: the reads wait `DEADLINE_S` for the hung GPU; the hung call waits at most `BOUND_S`."""

from __future__ import annotations

from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.collector import GpuCollector
from tests.exporters.test_exporter_nvml_gpu_hung import TEMP, XID, HungTemperature, ended

DEADLINE_S = 0.5


def test_a_late_gpu_publishes_the_xid_the_drain_heard_and_79_while_it_is_lost():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    nvml = HungTemperature(devs)
    collector = GpuCollector(NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S)))
    Scrape(collector)
    try:
        nvml.hung = "GPU-1"
        nvml.push_xid(devs[1], 119)
        s = Scrape(collector)
        assert s.values[XID] == {"GPU-0": 0, "GPU-1": 119, "GPU-2": 0}   # was NaN: no series for GPU-1
        assert XID not in s.failed("GPU-1") and TEMP in s.failed("GPU-1")
        devs[2].lost = True
        assert Scrape(collector).values[XID]["GPU-2"] == 79
        devs[2].lost, nvml.hung = False, "GPU-2"   # back on the bus, but its next read hangs (GPU-1's still stuck)
        s = Scrape(collector)
        assert s.values[XID] == {"GPU-0": 0, "GPU-1": 119, "GPU-2": 79}   # was NaN for both
    finally:
        nvml.release.set()
    ended()
    s = Scrape(collector)
    assert s.values[XID] == {"GPU-0": 0, "GPU-1": 119, "GPU-2": 0} and s.values[TEMP]["GPU-1"] == 45
