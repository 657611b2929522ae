"""The XID drain never registers, from the collection's thread, a GPU whose read job tried its registration.

The drain runs in the collection's thread under the backend's lock: a registration there that hangs (a GPU in
recovery) hangs the whole collection (d520e07). A GPU's read job registers it under the deadline (1972d02), so the
drain leaves alone a GPU whose job tried since the last drain (`XidEvents._tried`) and one served late: its late job
tried before the last drain cleared `_tried`, and its registration, refused late, was asked again by the drain, which
then hung with the GPU (audit s33a9, late_refusal_then_hang).

Bounded: hung calls wait at most `BOUND_S`, threads joined with a timeout."""

from __future__ import annotations

import threading

from exporters.backends.fake_nvml import FakeNvml, NVMLError
from tests.exporters.test_exporter_nvml_gpu_late_served import returned
from tests.exporters.test_exporter_nvml_xid_registered_by_read import gpu_1_refused
from tests.exporters.test_exporter_power_cap_stuck_gpu import in_thread

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
