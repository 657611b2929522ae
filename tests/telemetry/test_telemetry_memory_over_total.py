"""A GPU that reads more memory used than it has (free memory below 0) is a broken exporter: the reading is refused.

`arrays` folds free memory into the snapshot's total (used + free) before `check_values`, so the bound on
``gpu:memory_free:bytes`` never ran: 1024 MiB used of 1023 reached the planner (auditor a2, session 31)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_telemetry_prometheus_unit import FakeClient, source

from balancer.errors import InvalidTelemetry
from balancer.telemetry.gpu_frame import check_values

MiB = 1048576


def test_memory_used_over_its_total_is_invalid_telemetry_naming_the_gpu_and_its_figures():
    with pytest.raises(InvalidTelemetry, match=r"gpu:memory_free:bytes = -1 MiB on GPU-a0 \(node-a\).*"
                                               r"1024 MiB used of 1023 MiB") as info:
        source(FakeClient(values={("GPU-a0", "mem_free_mib"): -1 * MiB})).snapshot()
    assert info.value.subjects == ("GPU-a0",)


def test_a_full_gpu_is_a_reading():
    snap = source(FakeClient(values={("GPU-a0", "mem_free_mib"): 0})).snapshot()
    i = snap.gpu_by_uuid["GPU-a0"]
    assert snap.mem_used_mib[i] == snap.mem_total_mib[i] == 1024


def test_only_the_gpus_checked_refuse_the_reading():
    wide = pd.DataFrame({"UUID": ["GPU-0", "GPU-1"], "hostname": ["node-0", "node-1"]})
    arrays = {"mem_used_mib": np.array([10.0, 10.0]), "mem_total_mib": np.array([9.0, 20.0]),
              "power_w": np.full(2, 300.0), "power_limit_w": np.full(2, 700.0)}
    check_values(arrays, wide, np.array([False, True]))   # node-0's GPU is another shard's
    with pytest.raises(InvalidTelemetry, match="GPU-0"):
        check_values(arrays, wide, np.array([True, True]))
