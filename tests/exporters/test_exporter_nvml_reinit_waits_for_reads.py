"""NVML was initialised again while a GPU's read was still inside it (audit s32y2): ``nvmlShutdown`` ran under a call
in flight, and when that read returned it freed a GPM sample allocated under the old initialisation, which NVML's
shutdown may have freed already (a double free: a crash on a real NVML). Now the backend does not initialise NVML
again while a read is stuck (`GpuReads.stuck`): it stays blind, says why, and re-initialises once the read returns.
Should a read still outlive its initialisation, GPM checks freshness before each free.

Real time: the reads wait `DEADLINE_S` for the hung GPU; the hung call waits at most `BOUND_S`."""

from __future__ import annotations

import threading

import pytest
from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice, NVMLError_DriverNotLoaded
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.collector import GpuCollector
from exporters.power_caps import TargetUnavailable
from tests.exporters.test_exporter_nvml_gpu_hung import (
    BOUND_S,
    DEADLINE_S,
    TEMP,
    HiddenStuck,
    HungTemperature,
    ended,
)


def started(nvml: HungTemperature, reads: GpuReads) -> tuple[NvmlBackend, GpuCollector]:
    backend = NvmlBackend(nvml, hostname="n1", reads=reads)
    collector = GpuCollector(backend)
    Scrape(collector)
    return backend, collector


def nvml_down_and_back(collector: GpuCollector, nvml: HungTemperature) -> None:
    """A scrape that leaves a GPU's read hung, one while NVML does not answer, then NVML answering again."""
    Scrape(collector)
    nvml.broken = NVMLError_DriverNotLoaded
    Scrape(collector)
    nvml.broken = None


def test_nvml_is_not_initialised_again_while_a_read_is_inside_it():
    nvml = HungTemperature([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)])
    backend, collector = started(nvml, GpuReads(DEADLINE_S))
    nvml.hung = "GPU-2"
    try:
        nvml_down_and_back(collector, nvml)   # GPU-2 late, its call still in NVML
        shutdowns = nvml.calls.count("nvmlShutdown")
        s = Scrape(collector)
        assert nvml.calls.count("nvmlShutdown") == shutdowns and backend.nvml_reinits == 0   # was 1, under the read
        assert s.values[TEMP] == {}   # blind until the read returns
        with pytest.raises(TargetUnavailable, match="once the read of GPU-2 returns"):
            backend.power_limits()
    finally:
        nvml.release.set()
    ended()
    s = Scrape(collector)
    assert backend.nvml_reinits == 1
    assert s.values[TEMP] == {"GPU-0": 45, "GPU-1": 45, "GPU-2": 45}


class HungGpmSample(HungTemperature):
    """GPU-1's ``nvmlGpmSampleGet`` blocks while `hang` is set; each sample remembers the initialisation it was
    allocated under, and a free of another initialisation's sample is recorded."""

    def __init__(self, devices):
        super().__init__(devices)
        self.hang = threading.Event()
        self.stale_frees: list[tuple[int, int]] = []

    def nvmlGpmSampleAlloc(self):
        sample = super().nvmlGpmSampleAlloc()
        sample.generation = self.generation
        return sample

    def nvmlGpmSampleGet(self, h, sample):
        if self.hang.is_set() and getattr(h, "target", h).uuid == "GPU-1":
            self.release.wait(BOUND_S)
        return super().nvmlGpmSampleGet(h, sample)

    def nvmlGpmSampleFree(self, sample) -> None:
        if sample.generation != self.generation:
            self.stale_frees.append((sample.generation, self.generation))
        super().nvmlGpmSampleFree(sample)


def test_a_read_that_outlived_its_initialisation_frees_no_gpm_sample_of_it():
    nvml = HungGpmSample([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)])
    backend, collector = started(nvml, HiddenStuck(DEADLINE_S))
    Scrape(collector)   # GPM primed: a previous sample held per GPU
    nvml.hang.set()
    try:
        nvml_down_and_back(collector, nvml)   # GPU-1 late, inside nvmlGpmSampleGet
        Scrape(collector)
        assert backend.nvml_reinits == 1
    finally:
        nvml.release.set()
    ended()
    assert nvml.stale_frees == []   # was [(0, 1)]: the old initialisation's sample freed under the new one
