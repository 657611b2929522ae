"""The capacity planner imports no forecasting module: `placed` (whether an owner has a pod on a GPU), which the
planner's holds and the forecaster share, lives in `balancer.model`. From `balancer.forecast.service` it loaded every
forecasting model (`balancer.forecast` registers them all) and pandas with it into each process planning capacity."""

from __future__ import annotations

import subprocess
import sys

# run in a fresh interpreter: this one has the forecasting modules loaded by other tests already
LOADED = """
import sys
import balancer.plan.capacity_loop
sys.exit(",".join(sorted(m for m in sys.modules if m == "pandas" or m.startswith("balancer.forecast"))) or None)
"""


def test_importing_the_capacity_loop_loads_no_forecasting_module_nor_pandas():
    done = subprocess.run([sys.executable, "-c", LOADED], capture_output=True, text=True, timeout=120)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
