"""The XID drain never registers, from the collection's thread, a GPU whose read job tried its registration.

The drain runs in the collection's thread under the backend's lock: a registration there that hangs (a GPU in
recovery) hangs the whole collection (d520e07). A GPU's read job registers it under the deadline (1972d02), so the
drain leaves alone a GPU whose job tried since the last drain (`XidEvents._tried`) and one served late: its late job
tried before the last drain cleared `_tried`, and its registration, refused late, was asked again by the drain, which
then hung with the GPU (audit s33a9, late_refusal_then_hang). And a set made anew (GpuIsLost from the wait, or after
a wait that failed) is registered by the drain, each GPU in its own job under the deadline: it registered every GPU
read in time from the collection's thread, and hung with one in recovery since its read (drain_reg_hangs_on_rebuild,
drain_reg_hangs_after_deaf).

Bounded: hung calls wait at most `BOUND_S`, threads joined with a timeout."""

from __future__ import annotations

import math
import threading

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError, NVMLError_GpuIsLost
from exporters.backends.nvml import XID, NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from tests.exporters.test_exporter_nvml_gpu_late_served import returned
from tests.exporters.test_exporter_nvml_xid_registered_by_read import gpu_1_refused
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread

REGISTER, BOUND_S = "nvmlDeviceRegisterEvents", 5.0


class Registrations(FakeNvml):
    """Records the thread of each XID registration of GPU-1; `slow_refused` makes the next one wait for `first` and
    be refused, every later one wait for `release` (a GPU in recovery)."""

    def __init__(self, devices):
        super().__init__(devices)
        self.threads: list[str] = []
        self.slow_refused = False
        self.hang = False
        self.first, self.release = threading.Event(), threading.Event()

    def _dev(self, h, fn):
        if fn == REGISTER and getattr(h, "target", h).uuid == "GPU-1":
            self.threads.append(threading.current_thread().name)
            if self.slow_refused:
                self.slow_refused, self.hang = False, True
                self.first.wait(BOUND_S)
                raise NVMLError()
            if self.hang:
                self.release.wait(BOUND_S)
        return super()._dev(h, fn)


def test_a_registration_its_read_job_had_refused_is_not_asked_again_by_the_drain_of_that_collection():
    devs, nvml, backend = gpu_1_refused(Registrations, 1.0)
    devs[1].fail = {REGISTER: NVMLError}
    nvml.threads.clear()
    backend.read()   # GPU-1's job: refused; the drain after it must not ask from the collection's thread
    assert nvml.threads == ["gputide-read-GPU-1"]
    devs[1].fail = {}
    backend.read()
    assert nvml.threads == ["gputide-read-GPU-1"] * 2
    assert backend._xids.listening.tolist() == [True, True]


def test_a_gpu_served_late_is_not_registered_by_the_drain_so_a_hang_there_leaves_the_collection_free():
    devs, nvml, backend = gpu_1_refused(Registrations, 0.2)
    nvml.threads.clear()
    nvml.slow_refused = True
    backend.read()   # GPU-1 late, its job inside the slow registration; this drain clears `_tried`
    assert backend.reads.stuck() == ["GPU-1"]
    threading.Timer(0.05, nvml.first.set).start()   # refused while the next collection waits for it: served late
    t, out = in_thread(backend.read)
    try:
        assert not t.is_alive(), "the drain registered GPU-1 from the collection's thread and hung there"
        assert "error" not in out
        assert all(name.startswith("gputide-read-") for name in nvml.threads), nvml.threads
    finally:
        nvml.release.set()
        t.join(BOUND_S)
        returned(backend.reads)


def wait_fails_once(nvml, error: type[NVMLError]) -> None:
    wait, calls = nvml.nvmlEventSetWait, []

    def fails_once(events, timeout_ms):
        calls.append(1)
        if len(calls) == 1:
            raise error()
        return wait(events, timeout_ms)

    nvml.nvmlEventSetWait = fails_once


def test_a_set_made_anew_registers_each_gpu_in_its_job_so_one_hung_there_leaves_the_collection_free():
    """GpuIsLost from the wait: the set is made anew in the same drain; GPU-1, read in time, has fallen into recovery
    and hangs at its registration. The healthy GPU keeps its XID that same collection."""
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = HungDevice(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(0.2))
    backend.read()
    nvml.hung, nvml.hang_on = "GPU-1", REGISTER
    wait_fails_once(nvml, NVMLError_GpuIsLost)
    nvml.push_xid(devs[0], 43)
    t, out = in_thread(backend.read)
    try:
        assert not t.is_alive(), "the drain registered GPU-1 on the new set from the collection's thread"
        assert not math.isnan(out["result"].values[XID][0])   # registered on the new set in time: heard
        assert backend.reads.stuck() == ["GPU-1"]
    finally:
        nvml.release.set()
        t.join(BOUND_S)
        returned(backend.reads)
    nvml.push_xid(devs[0], 48)
    assert backend.read().values[XID].tolist() == [48.0, 0.0]   # GPU-1 registered once its job returned


def test_a_set_made_anew_after_a_failed_wait_leaves_the_collection_free_of_a_hung_registration():
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    nvml = HungDevice(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(0.2))
    backend.read()
    wait_fails_once(nvml, NVMLError)
    backend.read()   # deaf: the set dropped
    nvml.hung, nvml.hang_on = "GPU-1", REGISTER   # GPU-1 reads fine, its registration hangs
    t, out = in_thread(backend.read)
    try:
        assert not t.is_alive(), "the drain registered GPU-1 on the new set from the collection's thread"
        assert not math.isnan(out["result"].values[XID][0])
    finally:
        nvml.release.set()
        t.join(BOUND_S)
        returned(backend.reads)
