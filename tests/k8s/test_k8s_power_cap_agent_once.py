"""`gputide power-cap-agent --once` (a check or a step in a script) exited 0 whatever its one sync did: caps NVML
refused, or an annotation it could not read, read as success. It exits 1 then, 0 when the sync did what was asked
(the fake API server and the fake NVML, through the command as a user runs it)."""

from __future__ import annotations

import time

import pytest
from fakeapi import FakeKube, node

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.cli import main
from balancer.cmd import power_cap_agent
from balancer.model import SetPowerLimit
from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission
from exporters.backends.nvml import NvmlBackend


@pytest.mark.parametrize(("refused", "expected"), [(False, 0), (True, 1)],
                         ids=["the cap applied: 0", "NVML refused it (no CAP_SYS_ADMIN): 1"])
def test_once_exits_non_zero_when_its_sync_failed(kube: FakeKube, api, kubeconfig, monkeypatch, refused, expected):
    kube.add(node("n1", 1))
    gpu = FakeDevice(uuid="GPU-0")
    if refused:
        gpu.fail["nvmlDeviceSetPowerManagementLimit"] = NVMLError_NoPermission
    monkeypatch.setattr(power_cap_agent, "nvml_backend", lambda: NvmlBackend(FakeNvml([gpu])))
    cap = SetPowerLimit(reason="hot", gpu=0, uuid="GPU-0", node="n1", watts=450.0, previous_watts=700.0)
    # the real clock, the agent's: the cap's expiry (gputide.io/power-caps-until) is not past yet
    assert KubernetesActuator(api, sleep=lambda s: None, clock=time.time).apply(cap, None).outcome == "applied"
    argv = ["power-cap-agent", "--node", "n1", "--kubeconfig", kubeconfig, "--once", "--port", "0"]
    assert main(argv) == expected
    assert gpu.limit_mw == (700_000 if refused else 450_000)
