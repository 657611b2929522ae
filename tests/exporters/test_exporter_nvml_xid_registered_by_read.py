"""A GPU not registered for XID events is registered by its own read, in its job under the reads' deadline.

A GPU slower than the deadline has a fresh late read running at every drain, and the drain skips every GPU late or
stuck (a registration there, from the collection's thread under the backend's lock, would hang the collection with
the GPU), so once its registration was refused (or the event set made anew) it was never registered again: its XID
NaN for good (audit s32y7, p5). 01a2118 registered it from the drain when its earlier late read was served, and was
reverted (d520e07): a slow GPU that then hung took the collection with it. Its read job registers it now: a slow GPU
is registered as its read returns, and a registration that hangs leaves that GPU late, the collection not hung. An
event set dropped while a registration on it is in flight is freed once that registration returns, not under it.

Bounded: each call of the slow GPU sleeps `CALL_S`; hung calls wait at most `BOUND_S`, threads joined with a timeout."""

from __future__ import annotations

import time

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError
from exporters.backends.nvml import XID, NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from tests.exporters.test_exporter_nvml_gpu_late_served import returned
from tests.exporters.test_exporter_power_cap_stuck_gpu import HungDevice, in_thread

DEADLINE_S, CALL_S = 0.05, 0.01   # a read makes over ten calls: always late, and returns well within a second
REGISTER = "nvmlDeviceRegisterEvents"


class SlowDevice(FakeNvml):
    """Every call of the GPU `slow` but its XID registration takes `CALL_S`."""

    slow: str | None = None

    def _dev(self, h, fn):
        if self.slow is not None and getattr(h, "target", h).uuid == self.slow and fn != REGISTER:
            time.sleep(CALL_S)
        return super()._dev(h, fn)


def gpu_1_refused(make, deadline_s: float = DEADLINE_S):
    """Two GPUs, GPU-1's XID registration refused at start (refused no more once this returns), read once."""
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(2)]
    devs[1].fail = {REGISTER: NVMLError}
    nvml = make(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(deadline_s))
    backend.read()
    assert backend._xids.listening.tolist() == [True, False]
    devs[1].fail = {}
    return devs, nvml, backend


def test_a_gpu_always_late_but_not_hung_is_registered_for_xids_by_its_read_and_its_xid_heard():
    devs, nvml, backend = gpu_1_refused(SlowDevice)
    nvml.slow = "GPU-1"
    backend.read()   # late: skipped by the drain, registered by its read once it gets there
    returned(backend.reads)
    assert backend._xids.listening.tolist() == [True, True]
    nvml.push_xid(devs[1], 48)
    for _ in range(3):   # late at every collection, its XID heard all the same
        assert backend.read().values[XID].tolist() == [0.0, 48.0]
    returned(backend.reads)


def test_a_registration_that_hangs_leaves_its_gpu_late_not_the_collection_hung():
    devs, nvml, backend = gpu_1_refused(HungDevice, 0.2)
    nvml.hung, nvml.hang_on = "GPU-1", REGISTER   # its read's calls answer, its registration does not
    try:
        t, out = in_thread(backend.read)
        assert not t.is_alive(), "the collection hung in GPU-1's XID registration"
        assert out["result"].values["DCGM_FI_DEV_GPU_TEMP"][0] == 45 and backend.reads.stuck() == ["GPU-1"]
        t, out = in_thread(backend.read)   # stuck: not read, nor registered, by this collection
        assert not t.is_alive() and backend._xids.listening.tolist() == [True, False]
    finally:
        nvml.release.set()
    returned(backend.reads)
    assert backend._xids.listening.tolist() == [True, True]
    nvml.push_xid(devs[1], 48)
    assert backend.read().values[XID].tolist() == [0.0, 48.0]


def test_an_event_set_dropped_under_a_registration_in_flight_is_freed_once_it_returns():
    devs, nvml, backend = gpu_1_refused(HungDevice, 0.2)
    nvml.hung, nvml.hang_on = "GPU-1", REGISTER
    wait = nvml.nvmlEventSetWait
    try:
        backend.read()   # GPU-1's registration in flight on the set
        events = backend._xids._set

        def deaf(*args):
            raise NVMLError()

        nvml.nvmlEventSetWait = deaf   # the set hears nothing: dropped, every GPU unheard
        assert backend.read().values[XID].tolist()[0] != 0.0
        assert events not in nvml.freed_sets   # not freed under the registration
    finally:
        nvml.nvmlEventSetWait = wait
        nvml.release.set()
    returned(backend.reads)
    assert events in nvml.freed_sets and not nvml.used_freed_set
    assert backend._xids.listening.tolist() == [False, False]   # not on the dropped set: registered anew
    backend.read()
    returned(backend.reads)
    assert backend._xids.listening.tolist() == [True, True]
