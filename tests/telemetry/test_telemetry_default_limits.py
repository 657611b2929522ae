"""`gpu_frame.default_limits`: per GPU row the catalogue's TDP of its board, 0 where the catalogue does not know it or
no modelName is given; each model is looked up once (a pass over codes, not a Python loop over the GPUs)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from balancer.telemetry import gpu_frame
from balancer.telemetry.gpu_frame import default_limits


def test_each_row_gets_its_boards_tdp_and_unknown_or_missing_names_0(monkeypatch):
    asked: list[object] = []
    real = gpu_frame.catalog.by_model_name
    monkeypatch.setattr(gpu_frame.catalog, "by_model_name", lambda n: asked.append(n) or real(n))
    h100 = "NVIDIA H100 80GB HBM3"
    wide = pd.DataFrame({"modelName": [h100, None, "unknown board", h100, float("nan")]})
    assert default_limits(wide).tolist() == [700.0, 0.0, 0.0, 700.0, 0.0]
    assert sorted(asked) == sorted([h100, "unknown board"])
    assert np.array_equal(default_limits(pd.DataFrame({"x": [1, 2]})), np.zeros(2))
