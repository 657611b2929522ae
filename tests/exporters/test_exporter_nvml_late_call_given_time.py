"""A late call's warning says how long it was waited for: the XID drain's registrations are called `until` what is
left of the reads' deadline (`exporters.backends.nvml.NvmlBackend._register_xids`), so a registration given 0.25 s
was said not to have returned "after 3 s" (the reads' `timeout_s`).

Bounded: the late job waits on `release` at most `BOUND_S`; the call itself waits 0.25 s (its clock stands still)."""

from __future__ import annotations

import logging
import threading

from exporters.backends.nvml_gpu_reads import GpuReads

TIMEOUT_S, GIVEN_S, BOUND_S = 3.0, 0.25, 10.0


def test_a_call_until_a_deadline_is_said_late_after_the_time_it_was_given(caplog):
    release = threading.Event()
    reads = GpuReads(TIMEOUT_S, clock=lambda: 100.0)
    try:
        with caplog.at_level(logging.WARNING, logger="exporters.backends.nvml_gpu_reads"):
            late = reads.call({"GPU-0": lambda: release.wait(BOUND_S)}, "XID registration", until=100.0 + GIVEN_S)
        assert late["GPU-0"].late
        assert "GPU GPU-0: the XID registration has not returned after 0.25 s" in caplog.text, caplog.text
    finally:
        release.set()

