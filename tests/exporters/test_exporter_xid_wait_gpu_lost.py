"""``nvmlEventSetWait`` answering GpuIsLost (NVML's answer when a GPU registered on the set fell off the bus) was
taken for the whole set deaf: every GPU's XID series went missing for that scrape, the healthy ones too (and the
controller keeps a GPU without its XID series from new work). Now it is one GPU lost: the set is made anew within
the same drain, without the lost GPU, and the healthy GPUs keep their XID, heard on the new set."""

from __future__ import annotations

from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_GpuIsLost
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector

XID = "DCGM_FI_DEV_XID_ERRORS"


class LostOnTheSet(FakeNvml):
    """Its event sets answer GpuIsLost while a GPU registered on them is lost, as NVML's do."""

    def __init__(self, devices: list[FakeDevice]) -> None:
        super().__init__(devices)
        self.registered: list[tuple[object, object]] = []   # (event set, handle), in order

    def nvmlDeviceRegisterEvents(self, h, types, events) -> None:
        super().nvmlDeviceRegisterEvents(h, types, events)
        self.registered.append((events, h))

    def nvmlEventSetWait(self, events, timeout_ms):
        if any(s is events and self._target(h).lost for s, h in self.registered):
            raise NVMLError_GpuIsLost()
        return super().nvmlEventSetWait(events, timeout_ms)


def test_a_gpu_lost_on_the_event_set_leaves_the_other_gpus_their_xid():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    nvml = LostOnTheSet(devs)
    collector = GpuCollector(NvmlBackend(nvml, hostname="n1"))
    nvml.push_xid(devs[0], 48)
    assert Scrape(collector).values[XID] == {"GPU-0": 48, "GPU-1": 0, "GPU-2": 0}
    devs[1].lost = True
    nvml.push_xid(devs[2], 31)   # heard on the new set, in the same scrape
    s = Scrape(collector)
    assert s.values[XID] == {"GPU-0": 48, "GPU-1": 79, "GPU-2": 31}   # was {"GPU-1": 79}
    assert XID not in s.failed("GPU-0") and XID not in s.failed("GPU-2")
    assert Scrape(collector).values[XID] == {"GPU-0": 48, "GPU-1": 79, "GPU-2": 31}
    devs[1].lost = False   # back: registered again on the set, heard again
    assert Scrape(collector).values[XID] == {"GPU-0": 48, "GPU-1": 0, "GPU-2": 31}
    nvml.push_xid(devs[1], 13)
    assert Scrape(collector).values[XID]["GPU-1"] == 13
