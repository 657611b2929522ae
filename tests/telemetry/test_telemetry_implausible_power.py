"""Power readings no board gives are refused (invalid_telemetry); those real boards give are not.

A 0 W limit and a GPU drawing 4x its limit passed every check (auditor a2, session 31): the bounds were 0..3000 W
for each, one at a time. A limit under 1 W is no limit, and power above `POWER_OVER_LIMIT` (3x) its limit is not one
board's reading; the margin is wide, for a false reject holds the whole controller still."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from test_telemetry_prometheus_unit import FakeClient, source

from balancer.errors import InvalidTelemetry
from balancer.telemetry.gpu_frame import POWER_OVER_LIMIT, check_values


@pytest.mark.parametrize(("power", "limit", "message"), [
    (2900.0, 700.0, r"gpu:power:watts = 2900 W on GPU-a0 \(node-a\) is over 3 times its gpu:power_limit:watts "
                    r"\(700 W\)"),
    (1600.0, 400.0, r"gpu:power:watts = 1600 W on GPU-a0 .* \(400 W\)"),
    (300.0, 0.0, r"gpu:power_limit:watts = .*0\.0.* on GPU-a0 \(node-a\) is outside \[1, 3000\]"),
    (0.0, 0.0, "gpu:power_limit:watts"),
    (300.0, -700.0, "gpu:power_limit:watts"),
], ids=["4x its limit", "4x an A100's limit", "a 0 W limit", "an idle board with a 0 W limit", "a negative limit"])
def test_power_no_board_reports_is_invalid_telemetry_naming_the_gpu(power, limit, message):
    client = FakeClient(values={("GPU-a0", "power_w"): power, ("GPU-a0", "power_limit_w"): limit})
    with pytest.raises(InvalidTelemetry, match=message) as info:
        source(client).snapshot()
    assert info.value.subjects == ("GPU-a0",)


@pytest.mark.parametrize(("power", "limit"), [
    (704.823, 700.0),   # a loaded H200's instant reading at its limit (bench/device/h200-2026-12-04)
    (79.31, 700.0),     # the same board idle
    (0.0, 700.0),       # a board that reads 0 W idle
    (700.0, 350.0),     # the second after the controller capped it to half its TDP: the 1 s average still at 700 W
    (760.0, 350.0),     # ... and above it (overshoot)
    (POWER_OVER_LIMIT * 200.0, 200.0),   # the margin itself
], ids=["at-limit", "idle", "0-W", "just-capped", "just-capped-overshoot", "at-the-margin"])
def test_power_real_boards_report_is_a_reading(power, limit):
    snap = source(FakeClient(values={("GPU-a0", "power_w"): power, ("GPU-a0", "power_limit_w"): limit})).snapshot()
    i = snap.gpu_by_uuid["GPU-a0"]
    assert (snap.power_w[i], snap.power_limit_w[i]) == (power, limit)


def test_only_the_gpus_checked_refuse_the_reading():
    wide = pd.DataFrame({"UUID": ["GPU-0", "GPU-1"], "hostname": ["node-0", "node-1"]})
    arrays = {"power_w": np.array([2900.0, 300.0]), "power_limit_w": np.array([700.0, 700.0]),
              "mem_used_mib": np.zeros(2), "mem_total_mib": np.ones(2)}
    check_values(arrays, wide, np.array([False, True]))   # node-0's GPU is another shard's
    with pytest.raises(InvalidTelemetry, match="GPU-0"):
        check_values(arrays, wide, np.array([True, True]))
