"""The power-cap agent publishes each GPU's `caps_expired_total` at 0 before anything can
count in it. The counter used to be created by the first expiry's `.inc()`, so its first sample was already 1 and
`increase()` (GputidePowerCapsExpired) saw no increase: a GPU's first cap expiry never alerted."""

from __future__ import annotations

from fakeapi import FakeKube, node
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S, NodeAnnotationCaps
from balancer.cmd import power_cap_agent
from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from balancer.model import SetPowerLimit
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import EXPIRY_MARGIN_S, PowerCapAgent

EXPIRED = "gputide_power_cap_agent_caps_expired_total"


def gpus() -> list[FakeDevice]:
    return [FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{i:02x}:00.0") for i in range(2)]


def cap(uuid: str, watts: float) -> SetPowerLimit:
    return SetPowerLimit(reason="hot", gpu=0, uuid=uuid, node="n1", watts=watts, previous_watts=700.0)


def test_the_agent_publishes_every_gpus_expiry_counter_at_0_when_it_starts(kube: FakeKube, kubeconfig, monkeypatch):
    from exporters.backends import nvml as nvml_mod

    kube.add(node("n1", 2))   # no caps asked: nothing expires, nothing is applied
    devices, started = gpus(), []

    class Recorded(AgentMetrics):
        def __init__(self, registry: CollectorRegistry) -> None:
            super().__init__(registry)
            started.append(registry)

    monkeypatch.setattr(nvml_mod, "NvmlBackend", lambda **kw: NvmlBackend(nvml=FakeNvml(devices), hostname="n1"))
    monkeypatch.setattr(power_cap_agent, "AgentMetrics", Recorded)
    from balancer.cli import main

    assert main(["power-cap-agent", "--node", "n1", "--kubeconfig", kubeconfig, "--once"]) == 0
    reg, = started
    for uuid in ("GPU-0", "GPU-1"):
        assert reg.get_sample_value(EXPIRED, {"UUID": uuid}) == 0


def test_a_gpu_first_capped_later_has_its_counter_at_0_before_its_cap_expires(kube: FakeKube, api, clock):
    kube.add(node("n1", 2))
    reg = CollectorRegistry()
    metrics = AgentMetrics(reg)   # nothing seen at start (NVML not answering then, or GPUs not listed)
    agent = PowerCapAgent(NodeAnnotationCaps(api, "n1", sleep=lambda s: None),
                          NvmlBackend(nvml=FakeNvml(gpus()), hostname="n1"), clock=clock)
    KubernetesActuator(api, sleep=lambda s: None, clock=clock).apply(cap("GPU-0", 450.0), None)
    assert sync_once(agent, metrics) == {"GPU-0": 450.0}
    assert reg.get_sample_value(EXPIRED, {"UUID": "GPU-0"}) == 0   # scraped at 0 before any expiry
    clock.advance(POWER_CAP_TTL_S + EXPIRY_MARGIN_S + 1)   # the controller died: nothing renews the cap
    assert sync_once(agent, metrics) == {"GPU-0": 700.0}
    assert reg.get_sample_value(EXPIRED, {"UUID": "GPU-0"}) == 1


def test_gpus_named_is_empty_when_the_target_lists_none_or_cannot():
    class Down:
        def power_limits(self):
            raise RuntimeError("NVML Shutdown")

    assert power_cap_agent.gpus_named(object()) == set()
    assert power_cap_agent.gpus_named(Down()) == set()
    assert power_cap_agent.gpus_named(NvmlBackend(nvml=FakeNvml(gpus()), hostname="n1")) == {"GPU-0", "GPU-1"}
