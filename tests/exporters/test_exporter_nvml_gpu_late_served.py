"""A GPU always slower than the reads' deadline was never served, and logged twice at every collection (audit s32y2:
"GPU 2 served in 0/40 reads, warnings logged 78"): a read that returned after its collection was dropped, and the
next collection's read of the GPU was late again. One GPU read one after another (before dd6c513) was served, late.
Now a late read that has returned is served at the next collection when that collection's own read is late too, if
it began at most `max_age_s` ago, read without an error, under the same NVML initialisation; the log says when a
GPU's read turns late, stuck and in time again, not at every collection.

Real time: waits of a few tenths of a second; a hung call waits at most `BOUND_S`."""

from __future__ import annotations

import logging
import threading
import time

import pytest
from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_DriverNotLoaded
from exporters.backends.nvml import NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from exporters.collector import GpuCollector
from exporters.power_caps import TargetUnavailable
from tests.cli.test_cli_health import Clock
from tests.exporters.test_exporter_nvml_gpu_hung import BOUND_S, TEMP, ended

DEADLINE_S = 0.2
READS = "exporters.backends.nvml_gpu_reads"


class SlowTemperature(FakeNvml):
    """GPU-2's temperature takes `SLOW_S`, longer than the deadline; `gate`, when set, holds each of its calls until
    one pass is given (`gate.release()`, at most `BOUND_S`)."""

    SLOW_S = 0.35

    def __init__(self, devices: list[FakeDevice]) -> None:
        super().__init__(devices)
        self.gate: threading.Semaphore | None = None

    def nvmlDeviceGetTemperature(self, h, sensor):
        if self._target(h).uuid == "GPU-2":
            if self.gate is not None:
                self.gate.acquire(timeout=BOUND_S)
            else:
                time.sleep(self.SLOW_S)
        return super().nvmlDeviceGetTemperature(h, sensor)


def returned(reads: GpuReads) -> None:
    """Wait (at most `BOUND_S`) until no read is stuck."""
    for _ in range(int(BOUND_S * 100)):
        if not reads.stuck():
            return
        time.sleep(0.01)


def test_a_gpu_slower_than_the_deadline_is_served_one_collection_late_and_logged_once(caplog):
    nvml = SlowTemperature([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)])
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    collector = GpuCollector(backend)
    served = 0
    with caplog.at_level(logging.WARNING, logger=READS):
        for _ in range(5):
            s = Scrape(collector)
            served += "GPU-2" in s.values[TEMP]
            assert s.values[TEMP].keys() >= {"GPU-0", "GPU-1"}
            returned(backend.reads)   # a scrape interval: the slow read returns before the next one
    assert served == 4   # all but the first (was 0 of 5)
    assert [r.getMessage()[:40] for r in caplog.records if r.name == READS and "GPU-2" in r.getMessage()] == \
        ["GPU GPU-2: its read has not returned aft"]   # was two at every collection
    ended()


def test_a_gpu_slower_than_the_scrape_interval_is_logged_once_not_at_every_collection(caplog):
    nvml = SlowTemperature([FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)])
    collector = GpuCollector(NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S)))
    served = 0
    with caplog.at_level(logging.WARNING, logger=READS):
        for _ in range(6):   # back to back: the slow read is still running at every other collection
            served += "GPU-2" in Scrape(collector).values[TEMP]
    assert served >= 2   # each read that returned, at the collection after it returned
    assert len([r for r in caplog.records if r.name == READS and "GPU-2" in r.getMessage()]) == 1   # no churn
    ended()


def job(gate: threading.Event, value: object):
    def read() -> object:
        gate.wait(BOUND_S)
        return value
    return read


def test_a_late_read_is_served_at_the_next_run_only_if_recent_and_without_error():
    clock = Clock()
    reads = GpuReads(DEADLINE_S, clock=clock, max_age_s=30.0)
    gates = [threading.Event() for _ in range(4)]
    try:
        assert reads.run({"a": job(gates[0], "first")}) == {}
        gates[0].set()
        returned(reads)
        clock.now += 20.0
        got = reads.run({"a": job(gates[1], "second")})   # its own read late too: the first one's, 20 s old
        assert got["a"].result == "first" and got["a"].late
        gates[1].set()
        returned(reads)
        clock.now += 31.0
        assert reads.run({"a": job(gates[2], "third")}) == {}   # the second one is 31 s old: not served
        gates[2].set()
        returned(reads)

        def fails() -> None:
            raise RuntimeError("no")

        gates[3].set()
        got = reads.run({"a": fails})   # done in time: its own read served, the third (in time) dropped
        assert isinstance(got["a"].error, RuntimeError) and not got["a"].late
    finally:
        for g in gates:
            g.set()
    ended()


def test_a_late_read_of_an_earlier_nvml_initialisation_is_not_served():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(3)]
    nvml = SlowTemperature(devs)
    nvml.gate = threading.Semaphore(0)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    collector = GpuCollector(backend)
    try:
        nvml.gate.release()
        Scrape(collector)
        assert "GPU-2" not in Scrape(collector).values[TEMP]   # late, held at the gate
        devs[2].temp = 70
        nvml.gate.release()
        returned(backend.reads)   # returned with 70, under initialisation 0
        nvml.broken = NVMLError_DriverNotLoaded   # found by the power-cap agent: no collection reads meanwhile
        with pytest.raises(TargetUnavailable):
            backend.power_limits()
        nvml.broken = None
        s = Scrape(collector)   # initialised again; GPU-2's new read held at the gate, late
        assert backend.nvml_reinits == 1
        assert "GPU-2" not in s.values[TEMP]   # not initialisation 0's 70
    finally:
        for _ in range(4):
            nvml.gate.release()
    ended()
