"""What an SRE debugging `gputide power-cap-agent` gets from its metrics and log: a sync that failed because a GPU's
limit could not be read said so nowhere (only the failed counter moved; the reason stayed in memory), and nothing
said which GPUs the agent held under its cap nor what their give-back would restore (on the fake NVML)."""

from __future__ import annotations

import json
import logging

from prometheus_client import CollectorRegistry

from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_Timeout
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import JsonFileCaps, PowerCapAgent
from exporters.power_limits_before import LimitsBefore

W = 1000   # milliwatts
BEFORE = "gputide_power_cap_agent_limit_before_watts"


def agent(tmp_path, gpus, doc):
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps(doc))
    registry = CollectorRegistry()
    a = PowerCapAgent(JsonFileCaps(caps), NvmlBackend(FakeNvml(gpus)), LimitsBefore(tmp_path / "limits.json"))
    return a, caps, AgentMetrics(registry), registry


def test_a_gpu_whose_limit_cannot_be_read_is_named_in_the_log_once_and_its_recovery_too(tmp_path, caplog):
    gpu = FakeDevice(uuid="GPU-0")
    gpu.fail["nvmlDeviceGetPowerManagementLimit"] = NVMLError_Timeout
    a, _, metrics, registry = agent(tmp_path, [gpu], {"GPU-0": 400})
    caplog.set_level(logging.INFO)
    for _ in range(3):
        assert sync_once(a, metrics) == {}
    assert registry.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 3
    named = [r for r in caplog.records if "GPU-0" in r.getMessage() and "could not be read" in r.getMessage()]
    assert len(named) == 1 and named[0].levelno == logging.ERROR   # once, not every 10 s
    del gpu.fail["nvmlDeviceGetPowerManagementLimit"]
    assert sync_once(a, metrics) == {"GPU-0": 400.0}
    assert any("complete again" in r.getMessage() for r in caplog.records)


def test_the_gpus_under_gputides_cap_are_served_with_the_limit_their_give_back_restores(tmp_path):
    gpus = [FakeDevice(uuid="GPU-0", limit_mw=250 * W), FakeDevice(uuid="GPU-1", minor=1)]   # an operator's 250 W
    a, caps, metrics, registry = agent(tmp_path, gpus, {"GPU-0": 200})
    assert registry.get_sample_value(BEFORE, {"UUID": "GPU-0"}) is None
    sync_once(a, metrics)
    assert registry.get_sample_value(BEFORE, {"UUID": "GPU-0"}) == 250.0
    assert registry.get_sample_value(BEFORE, {"UUID": "GPU-1"}) is None   # not capped
    caps.write_text(json.dumps({"GPU-0": {"restore": 200}}))
    sync_once(a, metrics)
    assert gpus[0].limit_mw == 250 * W and registry.get_sample_value(BEFORE, {"UUID": "GPU-0"}) is None
