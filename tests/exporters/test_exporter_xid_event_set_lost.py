"""An event set that fails with anything but a Timeout hears no XID: the GPUs have no XID series, never a 0.

`drain()` took every NVML error from ``nvmlEventSetWait`` for "nothing queued": with NVML uninitialised under the
exporter (the driver unloaded or reloaded), every field of every GPU errored, yet DCGM_FI_DEV_XID_ERRORS kept
reading 0, the one series left, which the controller reads as a healthy GPU. Now the GPUs are unheard (a collect
error, as any field that fails to read) until a new event set is registered, and then XIDs are heard again.
"""

from __future__ import annotations

from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector

XID = "DCGM_FI_DEV_XID_ERRORS"


class NVMLError_Uninitialized(NVMLError):  # noqa: N801 - pynvml's name
    pass


class Everything(dict):
    """A device's `fail` that breaks every call."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> type[NVMLError]:
        return NVMLError_Uninitialized


def _uninitialized(*args: object) -> None:
    raise NVMLError_Uninitialized()


def test_nvml_uninitialised_mid_run_leaves_no_xid_series_then_xids_are_heard_again():
    devs = [FakeDevice(uuid="GPU-0", minor=0), FakeDevice(uuid="GPU-1", minor=1)]
    nvml = FakeNvml(devs)
    collector = GpuCollector(NvmlBackend(nvml))
    assert Scrape(collector).values[XID] == {"GPU-0": 0, "GPU-1": 0}
    wait, failing = nvml.nvmlEventSetWait, [d.fail for d in devs]
    for d in devs:
        d.fail = Everything()
    nvml.nvmlEventSetWait = _uninitialized
    nvml.nvmlGpmSampleAlloc = _uninitialized
    for _ in range(2):
        s = Scrape(collector)
        assert s.values[XID] == {}   # was {"GPU-0": 0, "GPU-1": 0}: the last series standing said "healthy"
        assert all(XID in s.failed(d.uuid) for d in devs)
    for d, fail in zip(devs, failing, strict=True):   # NVML answers again
        d.fail = fail
    nvml.nvmlEventSetWait = wait
    assert Scrape(collector).values[XID] == {"GPU-0": 0, "GPU-1": 0}
    nvml.push_xid(devs[1], 48)
    assert Scrape(collector).values[XID] == {"GPU-0": 0, "GPU-1": 48}


def test_only_the_event_set_failing_also_leaves_the_gpus_unheard():
    devs = [FakeDevice(uuid="GPU-0", minor=0)]
    nvml = FakeNvml(devs)
    collector = GpuCollector(NvmlBackend(nvml))
    nvml.push_xid(devs[0], 13)
    assert Scrape(collector).values[XID] == {"GPU-0": 13}
    wait = nvml.nvmlEventSetWait
    nvml.nvmlEventSetWait = _uninitialized
    s = Scrape(collector)
    assert s.values[XID] == {} and XID in s.failed("GPU-0")
    nvml.nvmlEventSetWait = wait
    assert Scrape(collector).values[XID] == {"GPU-0": 13}   # registered anew: its last XID, heard again
