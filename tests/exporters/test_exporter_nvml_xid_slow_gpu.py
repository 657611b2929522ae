"""A GPU slower than the read deadline, not hung, is registered for XID events again (audit s32y7, p5): the drain
skipped every GPU whose read was late, and such a GPU has a fresh late read running at every drain, so once its
registration was refused (or the event set made anew) it was never registered again: XID NaN for good. A late GPU
whose earlier late read this collection serves (its calls return) is registered; one late for the first time is still
skipped (it may be hung: `test_exporter_nvml_xid_drain_after_reads`).

Bounded: each call of the slow GPU sleeps `CALL_S`; its reads are waited for by `ended` (at most its `BOUND_S`)."""

from __future__ import annotations

import time

from exporters.backends.fake_nvml import FakeNvml
from tests.exporters.test_exporter_nvml_gpu_hung import ended
from tests.exporters.test_exporter_nvml_xid_drain_after_reads import gpu_1_refused

DEADLINE_S, CALL_S = 0.05, 0.01   # a read makes over ten calls: always late, and returns well within a second


class SlowDevice(FakeNvml):
    """Every call of the GPU `slow` but its XID registration takes `CALL_S`."""

    slow: str | None = None

    def _dev(self, h, fn):
        if self.slow is not None and getattr(h, "target", h).uuid == self.slow and fn != "nvmlDeviceRegisterEvents":
            time.sleep(CALL_S)
        return super()._dev(h, fn)


def test_a_gpu_always_late_but_not_hung_is_registered_for_xids_once_a_late_read_of_it_returned():
    _, nvml, backend = gpu_1_refused(SlowDevice, 2, DEADLINE_S)   # refused at start: retried at every drain
    nvml.slow = "GPU-1"
    backend.read()   # late for the first time: might be hung, not registered
    assert backend.reads.stuck() == ["GPU-1"]
    assert backend._xids.listening.tolist() == [True, False]
    ended()
    backend.read()   # late again, its earlier late read returned and served: slow, registered
    assert backend.reads.stuck() == ["GPU-1"]
    assert backend._xids.listening.tolist() == [True, True]
    ended()
