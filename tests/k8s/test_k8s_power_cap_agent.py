"""`gputide power-cap-agent`: what the controller writes into a node's `gputide.io/power-caps` annotation reaches
that node's GPUs through NVML (the fake API server and the fake NVML, end to end through the real clients)."""

from __future__ import annotations

import time

import pytest
from fakeapi import FakeKube, node
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import NodeAnnotationCaps
from balancer.actuate.kubernetes import POWER_CAP_ANNOTATION
from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from balancer.model import SetPowerLimit
from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import PowerCapAgent


def cap(uuid: str, watts: float) -> SetPowerLimit:
    return SetPowerLimit(reason="hot", gpu=0, uuid=uuid, node="n1", watts=watts, previous_watts=700.0)


@pytest.fixture
def gpus():
    return [FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{i:02x}:00.0") for i in range(2)]


@pytest.fixture
def agent(kube: FakeKube, api, gpus, clock):
    kube.add(node("n1", 2))
    reg = CollectorRegistry()
    source = NodeAnnotationCaps(api, "n1", sleep=lambda s: None)
    # the controller's clock (the actuator's) is the node's: the caps' expiry is judged by it
    return PowerCapAgent(source, NvmlBackend(nvml=FakeNvml(gpus), hostname="n1"), clock=clock), AgentMetrics(reg), reg


def test_a_cap_the_controller_writes_is_applied_to_the_gpu_clamped_and_only_once(kube, api, agent, gpus, clock):
    a, metrics, reg = agent
    actuator = KubernetesActuator(api, sleep=lambda s: None, clock=clock)
    snap = None
    assert sync_once(a, metrics) == {}   # nothing asked yet
    for action in (cap("GPU-0", 450.0), cap("GPU-1", 50.0)):
        res = actuator.apply(action, snap)
        assert res.outcome == "applied", res.detail
    assert sync_once(a, metrics) == {"GPU-0": 450.0, "GPU-1": 200.0}   # 50 W is below the GPU's 200 W floor
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (450_000, 200_000)
    assert reg.get_sample_value("gputide_power_cap_agent_applied_watts", {"UUID": "GPU-0"}) == 450.0
    assert sync_once(a, metrics) == {}   # unchanged: NVML is not asked again
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "unchanged"}) == 2
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "applied"}) == 1


def test_an_unreadable_annotation_keeps_the_limits_and_a_failing_backend_does_not_stop_the_agent(kube, api, agent,
                                                                                                  gpus, clock):
    a, metrics, reg = agent
    KubernetesActuator(api, sleep=lambda s: None, clock=clock).apply(cap("GPU-0", 500.0), None)
    sync_once(a, metrics)
    kube.inject("GET", r"/nodes/n1$", 500, count=2)   # the read and its one retry
    assert sync_once(a, metrics) == {} and gpus[0].limit_mw == 500_000
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 1   # not "unchanged"

    class Broken:
        def sync(self):
            raise RuntimeError("NVML gone")

    assert sync_once(Broken(), metrics) == {}
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 2
    assert sync_once(a, metrics) == {}   # the API answers again: no change to apply, not a failure
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 2


def test_a_gpu_nvml_refuses_fails_the_sync_so_the_alert_fires(kube, api, agent, gpus, clock):
    a, metrics, reg = agent
    gpus[0].fail["nvmlDeviceSetPowerManagementLimit"] = NVMLError_NoPermission   # the agent is not privileged
    KubernetesActuator(api, sleep=lambda s: None, clock=clock).apply(cap("GPU-0", 450.0), None)
    for _ in range(3):
        sync_once(a, metrics)
    # GputidePowerCapAgentFailing: failed syncs and no other kind
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 3
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "unchanged"}) == 0
    assert gpus[0].limit_mw == 700_000


def capped_and_applied(api, clock, agent: PowerCapAgent, metrics) -> KubernetesActuator:
    """The controller caps GPU-0 at 450 W and GPU-1 at 400 W, and the agent applies both; the actuator, to go on."""
    actuator = KubernetesActuator(api, sleep=lambda s: None, clock=clock)
    actuator.apply(cap("GPU-0", 450.0), None)
    actuator.apply(cap("GPU-1", 400.0), None)
    sync_once(agent, metrics)
    return actuator


def test_a_hand_edited_annotation_keeps_the_caps_until_it_is_removed(kube, api, agent, gpus, clock):
    a, metrics, reg = agent
    capped_and_applied(api, clock, a, metrics)
    kube.mutate("nodes", "n1", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"GPU-0": 450, "GPU-1": '}}})
    assert sync_once(a, metrics) == {}
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (450_000, 400_000)
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 1
    # the controller uninstalled: `kubectl annotate node n1 gputide.io/power-caps-` while the agent still runs
    kube.mutate("nodes", "n1", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: None}}})
    assert sync_once(a, metrics) == {"GPU-0": 700.0, "GPU-1": 700.0}
    assert reg.get_sample_value("gputide_power_cap_agent_applied_watts", {"UUID": "GPU-1"}) == 700.0


def give_back(uuid: str, catalogue_w: float) -> SetPowerLimit:
    return SetPowerLimit(reason="GPU cooled", gpu=0, uuid=uuid, node="n1", watts=catalogue_w, previous_watts=450.0,
                         give_back=True)


def test_a_give_back_restores_the_boards_own_default_not_the_catalogue_tdp(kube, api, agent, gpus, clock):
    a, metrics, _ = agent
    actuator = KubernetesActuator(api, sleep=lambda s: None, clock=clock)
    actuator.apply(cap("GPU-0", 350.0), None)
    sync_once(a, metrics)
    # a board that boots at 700 W of a model the catalogue lists at 400 W: 400 W is no give-back on it
    actuator.apply(give_back("GPU-0", catalogue_w=400.0), None)
    assert sync_once(a, metrics) == {"GPU-0": 700.0} and gpus[0].limit_mw == 700_000


def test_a_give_back_written_while_the_agent_is_down_is_carried_out_when_it_is_back(kube, api, agent, gpus, clock):
    a, metrics, _ = agent
    actuator = capped_and_applied(api, clock, a, metrics)
    gpus[1].limit_mw = 300_000   # the operator lowers GPU-1 further by hand
    actuator.apply(give_back("GPU-0", 700.0), None)   # meanwhile the agent is down: its memory goes with it
    actuator.apply(give_back("GPU-1", 700.0), None)
    restarted = PowerCapAgent(NodeAnnotationCaps(api, "n1", sleep=lambda s: None), a.target, clock=clock)
    assert sync_once(restarted, metrics) == {"GPU-0": 700.0}
    assert (gpus[0].limit_mw, gpus[1].limit_mw) == (700_000, 300_000)   # the hand-set limit is left as it is


def test_the_cli_applies_once_against_a_kubeconfig(kube, api, kubeconfig, gpus, monkeypatch, clock):
    from balancer.cli import main
    from exporters.backends import nvml as nvml_mod

    kube.add(node("n1", 2))
    # the agent's CLI judges the caps' expiry by the real clock: so does this controller write it
    KubernetesActuator(api, sleep=lambda s: None, clock=time.time).apply(cap("GPU-1", 300.0), None)
    monkeypatch.setattr(nvml_mod, "NvmlBackend", lambda **kw: NvmlBackend(nvml=FakeNvml(gpus), hostname="n1"))
    assert main(["power-cap-agent", "--node", "n1", "--kubeconfig", kubeconfig, "--once"]) == 0
    assert gpus[1].limit_mw == 300_000


@pytest.mark.parametrize(("argv", "field"), [([], "--node"), (["--node", "n1", "--port", "70000"], "--port"),
                                             (["--node", "n1", "--interval", "soon"], "--interval")])
def test_bad_agent_input_exits_2_naming_the_flag(argv, field, capsys):
    from balancer.cli import main

    assert main(["power-cap-agent", "--once", *argv]) == 2
    assert field in capsys.readouterr().err


def test_the_cli_keeps_the_limit_before_gputides_cap_in_its_state_file(kube, api, kubeconfig, gpus, monkeypatch,
                                                                        clock, tmp_path):
    import argparse
    import json

    from balancer.cmd import power_cap_agent
    from exporters.backends import nvml as nvml_mod

    kube.add(node("n1", 2))
    gpus[1].limit_mw = 500_000   # nvidia-smi -pl 500 before gputide caps it
    actuator = KubernetesActuator(api, sleep=lambda s: None, clock=time.time)   # the agent's CLI's clock
    actuator.apply(cap("GPU-1", 300.0), None)
    monkeypatch.setattr(nvml_mod, "NvmlBackend", lambda **kw: NvmlBackend(nvml=FakeNvml(gpus), hostname="n1"))
    parser = argparse.ArgumentParser()
    power_cap_agent.register(parser.add_subparsers())
    state = tmp_path / "limits.json"
    args = parser.parse_args(["power-cap-agent", "--node", "n1", "--kubeconfig", kubeconfig, "--once",
                              "--state-file", str(state)])
    assert args.func(args) == 0 and gpus[1].limit_mw == 300_000
    assert json.loads(state.read_text()) == {"GPU-1": {"before_w": 500.0, "set_w": 300.0}}
    back = SetPowerLimit(reason="GPU cooled", gpu=1, uuid="GPU-1", node="n1", watts=700.0, previous_watts=300.0,
                         give_back=True)
    assert actuator.apply(back, None).outcome == "applied"   # the controller gives it back; a new agent carries it out
    assert args.func(args) == 0 and gpus[1].limit_mw == 500_000
