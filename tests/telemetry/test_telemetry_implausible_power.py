"""Power readings no board gives are refused (invalid_telemetry); those real boards give are not.

A 0 W limit and a GPU drawing 4x its limit passed every check (auditor a2, session 31): the bounds were 0..3000 W
for each, one at a time. A limit under 1 W is no limit, and power above `POWER_OVER_LIMIT` (3x) its limit is not one
board's reading; the margin is wide, for a false reject holds the whole controller still. The reference is the larger
of the limit and the board's default limit (its catalogued TDP): for up to a second after a lower limit the 1 s average
still holds what the board drew before, and an operator's `nvidia-smi -pl 200` on a loaded H200 read 692-705 W, 3.5x
the limit, refused (auditor a7)."""

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
    (2200.0, 200.0, r"gpu:power:watts = 2200 W on GPU-a0 \(node-a\) is over 3 times its default limit \(700 W, its "
                    r"model's TDP; gpu:power_limit:watts 200 W\)"),
    (300.0, 0.0, r"gpu:power_limit:watts = .*0\.0.* on GPU-a0 \(node-a\) is outside \[1, 3000\]"),
    (0.0, 0.0, "gpu:power_limit:watts"),
    (300.0, -700.0, "gpu:power_limit:watts"),
], ids=["4x its limit", "over 3x its TDP under a low cap", "a 0 W limit", "an idle board with a 0 W limit",
        "a negative limit"])
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
    (692.0, 200.0),     # the second after an operator's nvidia-smi -pl 200 on a loaded 700 W board: the average
    (704.823, 200.0),   # ... and the instant reading (auditor a7: 3.5x the limit, refused)
    (POWER_OVER_LIMIT * 700.0, 200.0),   # the margin itself, over the TDP
    (POWER_OVER_LIMIT * 800.0, 800.0),   # ... and over a limit above it
], ids=["at-limit", "idle", "0-W", "just-capped", "just-capped-overshoot", "operator-cap-average",
        "operator-cap-instant", "at-the-margin", "at-the-margin-above-tdp"])
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


@pytest.mark.parametrize(("model", "power", "limit", "refused"), [
    ("NVIDIA A100-SXM4-80GB", 400.0, 100.0, False),   # capped to min_power_fraction 0.25 of its TDP: 4x the limit
    ("NVIDIA H200", 705.0, 200.0, False),
    ("NVIDIA H200", 2101.0, 200.0, True),             # over 3x its 700 W TDP
    ("NVIDIA Z9000", 705.0, 200.0, True),             # a board the catalogue does not know: its limit alone
    ("NVIDIA Z9000", 600.0, 200.0, False),
])
def test_the_reference_is_the_larger_of_the_limit_and_the_catalogued_tdp(model, power, limit, refused):
    wide = pd.DataFrame({"UUID": ["GPU-0"], "hostname": ["node-0"], "modelName": [model]})
    arrays = {"power_w": np.array([power]), "power_limit_w": np.array([limit]),
              "mem_used_mib": np.zeros(1), "mem_total_mib": np.ones(1)}
    if refused:
        with pytest.raises(InvalidTelemetry, match="GPU-0"):
            check_values(arrays, wide)
    else:
        check_values(arrays, wide)
