"""A GPU reset or a driver reload puts a GPU's power limit back to its default under a running agent, or before a
restarted one reads its state file: the agent applied gputide's cap again, but said so only as "power limit changed
... never raised above it" at INFO, and no metric counted it, so a GPU whose cap kept being lost (a flaky board
reset again and again, a script running ``nvidia-smi -pl`` on a timer) looked like a quiet, capped GPU. Such a cap
is counted per GPU (`gputide_power_cap_agent_caps_lost_total`) and logged as a warning (fake NVML)."""

from __future__ import annotations

import json
import logging

import pytest
from prometheus_client import CollectorRegistry

from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import JsonFileCaps, PowerCapAgent
from exporters.power_limits_before import LimitsBefore

LOST = "gputide_power_cap_agent_caps_lost_total"


@pytest.mark.parametrize("restarted", [False, True], ids=["under a running agent", "while the agent was down"])
def test_a_cap_a_gpu_reset_took_away_is_applied_again_counted_and_logged(tmp_path, caplog, restarted):
    gpus = [FakeDevice(uuid="GPU-0", limit_mw=250_000), FakeDevice(uuid="GPU-1", minor=1)]
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"GPU-0": 200, "GPU-1": 300}))
    registry = CollectorRegistry()
    metrics = AgentMetrics(registry)

    def agent():
        return PowerCapAgent(JsonFileCaps(caps), NvmlBackend(FakeNvml(gpus)), LimitsBefore(tmp_path / "s.json"))

    a = agent()
    sync_once(a, metrics)
    gpus[0].limit_mw = 700_000   # reset: the board's default; the operator's 250 W went with it
    if restarted:
        a = agent()
    caplog.set_level(logging.INFO)
    assert sync_once(a, metrics) == {"GPU-0": 200.0, **({"GPU-1": 300.0} if restarted else {})}
    assert gpus[0].limit_mw == 200_000
    assert registry.get_sample_value(LOST, {"UUID": "GPU-0"}) == 1
    assert registry.get_sample_value(LOST, {"UUID": "GPU-1"}) is None   # applied again after a restart, not lost
    [warning] = [r for r in caplog.records if r.levelno == logging.WARNING and "GPU-0" in r.getMessage()]
    assert "reset" in warning.getMessage()
    sync_once(a, metrics)
    assert registry.get_sample_value(LOST, {"UUID": "GPU-0"}) == 1   # counted once, not every sync after
