"""`GpuReads` says a GPU's calls are in time again per kind of call (`what`), not for all its calls at once.

One key for every call said, after a late power-limit Set, that the GPU's 'power-limit reads return in time again'
at the next limit read in time (review s33r3, stale text): it is the Sets that were late, and said so once one is
in time again.

Bounded: the late job sleeps `LATE_S`; `returned` waits at most its bound."""

from __future__ import annotations

import logging
import time

from exporters.backends.nvml_gpu_reads import GpuReads
from tests.exporters.test_exporter_nvml_gpu_late_served import returned

DEADLINE_S, LATE_S = 0.05, 0.2


def test_a_late_set_is_said_in_time_again_by_the_next_set_not_by_a_read(caplog):
    reads = GpuReads(DEADLINE_S)
    with caplog.at_level(logging.WARNING, logger="exporters.backends.nvml_gpu_reads"):
        assert reads.call({"GPU-0": lambda: time.sleep(LATE_S)}, "power-limit Set")["GPU-0"].late
        returned(reads)
        caplog.clear()
        assert not reads.call({"GPU-0": lambda: 1.0}, "power-limit read")["GPU-0"].late
        assert "in time again" not in caplog.text
        assert not reads.call({"GPU-0": lambda: 1.0}, "power-limit Set")["GPU-0"].late
        assert "GPU GPU-0: its power-limit Sets return in time again" in caplog.text
