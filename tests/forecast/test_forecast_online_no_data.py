"""A service with no real demand bucket has no forecast, whatever `min_history` says: the refusal is a ValueError
(`ShortHistory`), which `ServiceForecaster` turns into 'no forecast, the planner holds it', never an IndexError
from an empty history that would end the cycle."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from balancer.forecast.online import DemandForecaster


def test_no_real_bucket_is_short_history_even_with_min_history_0():
    f = DemandForecaster(model="persistence", step_s=300, min_history=0)
    idx = pd.date_range("2024-01-01", periods=24, freq="300s", tz="UTC")
    f.observe_history("chat", pd.Series(np.nan, index=idx))
    with pytest.raises(ValueError):
        f.forecast("chat", now=idx[-1].timestamp(), horizon_steps=12)
