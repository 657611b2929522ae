"""The XID drain's registrations end with the reads' deadline, not a fresh one each (audit s33a15, x1_time, x3_3T).

5acef81 ran the drain's registrations in the GPUs' jobs, each call under a fresh `timeout_s` after the reads had used
theirs, and a set made anew in the same drain (GpuIsLost from the wait) registered under another: a collection took
two or three read deadlines (0.62 s at 0.2 s; about 9 s at the defaults, past the 8 s ``--collect-timeout`` that
`balancer.cmd.exporter.watch_gpu_reads` sizes the reads' deadline to stay within). Now they get what is left of the
reads' deadline, at least a short grace (`XID_GRACE_S`) so the healthy GPUs of a set made anew are still heard that
collection when a late GPU used the whole deadline.

Bounds are generous (the old collection took three deadlines); every hang is released, at most `BOUND_S`."""

from __future__ import annotations

import threading
import time

from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError, NVMLError_GpuIsLost
from exporters.backends.nvml import XID, NvmlBackend
from exporters.backends.nvml_gpu_reads import GpuReads
from tests.exporters.test_exporter_nvml_gpu_late_served import returned

DEADLINE_S = 0.5
BOUND_S = 10.0
REG = "nvmlDeviceRegisterEvents"
TEMP = "nvmlDeviceGetTemperature"


class Delays(FakeNvml):
    """`slow[uuid][fn]`: seconds a call sleeps; `hang`: GPUs whose registration blocks until `release` is set."""

    def __init__(self, devices: list[FakeDevice]) -> None:
        super().__init__(devices)
        self.slow: dict[str, dict[str, float]] = {}
        self.hang: set[str] = set()
        self.release = threading.Event()

    def _dev(self, h, fn):
        uuid = getattr(h, "target", h).uuid
        if fn == REG and uuid in self.hang:
            self.release.wait(BOUND_S)
        if (delay := self.slow.get(uuid, {}).get(fn)) is not None:
            time.sleep(delay)
        return super()._dev(h, fn)


def gpus(n: int) -> tuple[list[FakeDevice], Delays, NvmlBackend]:
    devs = [FakeDevice(uuid=f"GPU-{i}", minor=i) for i in range(n)]
    nvml = Delays(devs)
    backend = NvmlBackend(nvml, hostname="n1", reads=GpuReads(DEADLINE_S))
    backend.read()
    return devs, nvml, backend


def test_a_collection_whose_registrations_hang_twice_takes_one_deadline_not_three():
    devs, nvml, backend = gpus(3)
    wait = nvml.nvmlEventSetWait

    def deaf(events, timeout_ms):
        raise NVMLError()

    nvml.nvmlEventSetWait = deaf
    backend.read()   # the set dropped: the next drain makes one and registers every GPU read in time
    script = iter(["lost"])

    def lost_once(events, timeout_ms):
        if next(script, None) == "lost":
            nvml.hang.add("GPU-0")   # its registration on the set made anew hangs too
            raise NVMLError_GpuIsLost()
        return wait(events, timeout_ms)

    nvml.nvmlEventSetWait = lost_once
    nvml.hang = {"GPU-1"}                            # the drain's registration of GPU-1 hangs
    nvml.slow = {"GPU-2": {TEMP: DEADLINE_S * 1.6}}   # GPU-2's read is late: the reads use their whole deadline
    try:
        t0 = time.monotonic()
        backend.read()
        took = time.monotonic() - t0
    finally:
        nvml.hang = set()
        nvml.release.set()
        returned(backend.reads)
    assert took < 2 * DEADLINE_S, f"the collection took {took:.2f} s at a {DEADLINE_S} s deadline"


def test_the_healthy_gpus_of_a_set_made_anew_are_heard_though_a_late_gpu_used_the_deadline(caplog):
    devs, nvml, backend = gpus(2)
    wait = nvml.nvmlEventSetWait
    script = iter(["lost"])

    def lost_once(events, timeout_ms):
        if next(script, None) == "lost":
            raise NVMLError_GpuIsLost()
        return wait(events, timeout_ms)

    nvml.nvmlEventSetWait = lost_once
    nvml.slow = {"GPU-1": {TEMP: DEADLINE_S * 1.6},   # late: the drain rebuilds the set once the deadline is spent
                 "GPU-0": {REG: 0.01}}   # a registration that answers, not instantly: within XID_GRACE_S
    try:
        xid = backend.read().values[XID].tolist()
    finally:
        returned(backend.reads)
    assert xid[0] == 0.0   # GPU-0 registered on the new set within the grace: heard this collection, not NaN
    assert "GPU GPU-0: the XID registration has not returned" not in caplog.text   # nor said late
