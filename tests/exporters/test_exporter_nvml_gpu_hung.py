"""One GPU's NVML call that does not return (a GPU in recovery) held up the whole collection: the GPUs were read
one after another, so past the collection timeout every scrape got the last complete collection, and after
``--serve-stale-for`` a 503, for every GPU of the node though one alone hung. Now each GPU is read in a thread of
its own with a deadline: the hung GPU's series are left out and its fields counted as errors, the other GPUs are
served in time, the hung GPU is not read again while its read is stuck (no thread piles up), and once that read
returns the GPU is read as before. Each read runs inside the health's `watching`: a read stuck past the collection
timeout leaves the exporter not ready, naming the GPU.

Real time: the reads wait `DEADLINE_S` for the hung GPU once (the fake's other reads take milliseconds); the hung
call waits at most `BOUND_S`, so a test that fails never hangs."""

from __future__ import annotations

import threading

from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import (
    FakeDevice,
    FakeHandle,
    FakeNvml,
    NVMLError_DriverNotLoaded,
    NVMLError_NotSupported,
)
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.collector import GpuCollector
from exporters.health import CollectHealth, TrackedCollector
from tests.cli.test_cli_health import Clock

TEMP = "DCGM_FI_DEV_GPU_TEMP"
XID = "DCGM_FI_DEV_XID_ERRORS"
DEADLINE_S = 1.0
BOUND_S = 20.0


class HungTemperature(FakeNvml):
    """``nvmlDeviceGetTemperature`` of the GPU named `hung` blocks until `release` is set (at most `BOUND_S`)."""

    def __init__(self, devices: list[FakeDevice]) -> None:
        super().__init__(devices)
        self.hung: str | None = None
        self.release = threading.Event()
        self.entered = 0

    def nvmlDeviceGetTemperature(self, h, sensor):
        if self._target(h).uuid == self.hung:
            self.entered += 1
            self.release.wait(BOUND_S)
        return super().nvmlDeviceGetTemperature(h, sensor)


def reading_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("gputide-read-")]


def ended() -> None:
    """Wait (at most `BOUND_S`) for the GPU reads' threads to end."""
    for _ in range(int(BOUND_S * 100)):
        if not reading_threads():
            return
        threading.Event().wait(0.01)


def test_a_hung_gpu_loses_its_series_the_others_are_served_and_it_is_read_again_once_its_call_returns():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(4)]
    nvml = HungTemperature(devs)
    clock = Clock()
    health = CollectHealth(clock=clock, collect_timeout_s=8.0)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S, watching=health.watching))
    collector = GpuCollector(backend)
    tracked = TrackedCollector(collector, health)
    tracked.exposition()
    nvml.hung = "GPU-2"
    try:
        for _ in range(3):
            tracked.exposition()   # answered in time: was the last complete collection, then a 503
            s = Scrape(collector)
            assert s.values[TEMP] == {"GPU-0": 45, "GPU-1": 45, "GPU-3": 45}
            assert s.present("GPU-2") == {XID} and TEMP in s.failed("GPU-2")   # its XID from the event drain
            assert s.present("GPU-0") == s.present("GPU-3") != set()
        assert nvml.entered == 1 and reading_threads() == ["gputide-read-GPU-2"]   # not read again while stuck
        assert health.ready()[0]   # the collections end in time
        clock.now += 9.0
        assert health.ready() == (False, "not ready: GPU GPU-2's read has been running for 9 s (timeout 8 s)")
    finally:
        nvml.release.set()
    ended()
    s = Scrape(collector)
    assert s.values[TEMP] == {"GPU-0": 45, "GPU-1": 45, "GPU-2": 45, "GPU-3": 45}
    assert s.values[XID] == {"GPU-0": 0, "GPU-1": 0, "GPU-2": 0, "GPU-3": 0}
    assert nvml.entered == 2 and health.ready()[0]


class NoUtilisationOnGpu2(HungTemperature):
    """GPU-2 answers NotSupported for utilisation whatever initialisation its handle is of (a real NVML's handles
    may outlive one); the fake's other calls refuse a handle of another initialisation."""

    def nvmlDeviceGetUtilizationRates(self, h):
        if (h.target if isinstance(h, FakeHandle) else h).uuid == "GPU-2":
            raise NVMLError_NotSupported()
        return super().nvmlDeviceGetUtilizationRates(h)


class HiddenStuck(GpuReads):
    """Reads whose stuck ones the backend cannot see: NVML is then initialised again under a read (the backend
    waits for stuck reads, `test_exporter_nvml_reinit_waits_for_reads`), to test the guard behind that."""

    def stuck(self) -> list[str]:
        return []


def test_a_read_hung_across_a_reinitialisation_writes_nothing_into_the_next_one():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    nvml = NoUtilisationOnGpu2(devs)
    collector = GpuCollector(NvmlBackend(nvml, hostname="n1", reads=HiddenStuck(DEADLINE_S)))
    Scrape(collector)
    nvml.hung = "GPU-2"
    try:
        Scrape(collector)   # GPU-2 late, its read hung
        nvml.broken = NVMLError_DriverNotLoaded
        Scrape(collector)
        nvml.broken, nvml.devices = None, [devs[2], devs[0], devs[1]]   # GPU-1 is index 2 now
        s = Scrape(collector)
        assert s.values[TEMP] == {"GPU-0": 45, "GPU-1": 45}   # GPU-2 not read again while its read is stuck
    finally:
        nvml.release.set()
    ended()   # the stuck read went on after its call returned, under the old initialisation
    s = Scrape(collector)
    assert s.values["DCGM_FI_DEV_GPU_UTIL"] == {"GPU-0": 60, "GPU-1": 60}   # not GPU-1 marked as GPU-2's index
    assert s.lacks("GPU-1") == set() and "DCGM_FI_DEV_GPU_UTIL" in s.lacks("GPU-2")
