"""Power caps expire, as the hot taint does (the fake API server, the fake NVML, end to end through the real clients):
the controller writes `gputide.io/power-caps-until` with its caps and renews it in its housekeeping once less than half
the TTL is left; the node's agent gives the caps back once it has passed. Before, a controller that died, was
uninstalled without cleanup or whose leader was stuck left its caps in force for good."""

from __future__ import annotations

import logging

import pytest
from fakeapi import FakeKube, node
from prometheus_client import CollectorRegistry

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S, NodeAnnotationCaps, caps_until_key, power_caps_renewal
from balancer.actuate.kubernetes import POWER_CAP_ANNOTATION, parse_time, rfc3339
from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from balancer.model import SetPowerLimit
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import EXPIRY_MARGIN_S, PowerCapAgent

UNTIL_KEY = caps_until_key(POWER_CAP_ANNOTATION)
INTERVAL_S = 30.0   # gputide run's default interval; the agent's is shorter, which changes nothing here
W = 1000


def cap(uuid: str, watts: float, give_back: bool = False) -> SetPowerLimit:
    return SetPowerLimit(reason="hot", gpu=0, uuid=uuid, node="n1", watts=watts, previous_watts=700.0,
                         give_back=give_back)


@pytest.fixture
def gpus():
    return [FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{i:02x}:00.0") for i in range(2)]   # 700 W


@pytest.fixture
def setup(kube: FakeKube, api, gpus, clock):
    """(controller, agent, agent metrics, their registry): one clock for both, as NTP keeps them."""
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    reg = CollectorRegistry()
    agent = PowerCapAgent(NodeAnnotationCaps(api, "n1", sleep=lambda s: None),
                          NvmlBackend(nvml=FakeNvml(gpus), hostname="n1"), clock=clock)
    return KubernetesActuator(api, sleep=lambda s: None, clock=clock), agent, AgentMetrics(reg), reg


def until(kube: FakeKube) -> float | None:
    return parse_time((kube.get("nodes", "n1")["metadata"].get("annotations") or {}).get(UNTIL_KEY))


def node_patches(kube: FakeKube) -> int:
    return len([r for r in kube.requests if r.method == "PATCH" and "/nodes/" in r.path])


def run_for(seconds: float, clock, controller: KubernetesActuator | None, agent, metrics) -> list[float]:
    """Cycles `INTERVAL_S` apart: the controller's housekeeping (None: it is dead), then the agent's sync; GPU-0's
    limit in watts after each."""
    limits = []
    for _ in range(int(seconds // INTERVAL_S)):
        clock.advance(INTERVAL_S)
        if controller is not None:
            controller.housekeeping()
        sync_once(agent, metrics)
        limits.append(agent.target.power_limits()["GPU-0"].current_w)
    return limits


def test_a_live_controller_keeps_its_cap_with_a_renewal_twice_per_ttl_and_a_dead_ones_cap_is_given_back(
        kube, setup, clock, caplog):
    controller, agent, metrics, reg = setup
    assert controller.apply(cap("GPU-0", 450.0), None).outcome == "applied"
    assert until(kube) == clock() + POWER_CAP_TTL_S
    before = node_patches(kube)
    assert set(run_for(3600, clock, controller, agent, metrics)) == {450.0}   # an hour, never given back
    # renewed once less than half the TTL is left: about twice per TTL, not a node patch every cycle
    assert 3600 / POWER_CAP_TTL_S * 2 - 1 <= node_patches(kube) - before <= 3600 / (POWER_CAP_TTL_S / 2) + 1
    assert clock() + POWER_CAP_TTL_S / 2 - INTERVAL_S <= until(kube) <= clock() + POWER_CAP_TTL_S

    died, last = clock(), until(kube)   # the controller dies (or its leader is stuck): nothing renews the cap
    with caplog.at_level(logging.WARNING):
        limits = run_for(last + EXPIRY_MARGIN_S + INTERVAL_S - died, clock, None, agent, metrics)
    given_back_at = died + INTERVAL_S * (limits.index(700.0) + 1)
    assert last + EXPIRY_MARGIN_S < given_back_at <= last + EXPIRY_MARGIN_S + INTERVAL_S
    assert given_back_at - died <= POWER_CAP_TTL_S + EXPIRY_MARGIN_S + INTERVAL_S
    assert reg.get_sample_value("gputide_power_cap_agent_caps_expired_total", {"UUID": "GPU-0"}) == 1
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 0
    warning, = (r.getMessage() for r in caplog.records if r.levelno == logging.WARNING)
    assert "GPU-0 on node n1" in warning and rfc3339(last) in warning
    run_for(600, clock, None, agent, metrics)
    assert reg.get_sample_value("gputide_power_cap_agent_caps_expired_total", {"UUID": "GPU-0"}) == 1   # once


def test_caps_an_older_controller_wrote_do_not_expire_until_the_new_one_gives_them_an_expiry(kube, setup, clock):
    controller, agent, metrics, _ = setup
    kube.mutate("nodes", "n1", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"GPU-0": 450}'}}})
    assert set(run_for(3 * POWER_CAP_TTL_S, clock, None, agent, metrics)) == {450.0}   # an upgrade drops no cap
    assert controller.recover() == [f"n1: power caps renewed until {rfc3339(clock() + POWER_CAP_TTL_S)}"]
    assert until(kube) == clock() + POWER_CAP_TTL_S
    limits = run_for(POWER_CAP_TTL_S + EXPIRY_MARGIN_S + INTERVAL_S, clock, None, agent, metrics)
    assert limits[-1] == 700.0   # from then on, an expiry like any other


def test_a_cap_that_expired_during_a_long_hold_is_renewed_and_applied_again(kube, setup, clock):
    """A controller that held still for longer than the TTL (fail-static, an emergency stop) still counts the GPU
    capped: its next housekeeping renews the cap, which the agent had given back, and says so."""
    controller, agent, metrics, _ = setup
    controller.apply(cap("GPU-0", 450.0), None)
    expired_at = until(kube)
    assert run_for(POWER_CAP_TTL_S + EXPIRY_MARGIN_S + INTERVAL_S, clock, None, agent, metrics)[-1] == 700.0
    note, = controller.housekeeping()
    assert note.startswith(f"n1: power caps had expired at {rfc3339(expired_at)}")
    sync_once(agent, metrics)
    assert agent.target.power_limits()["GPU-0"].current_w == 450.0


def test_the_last_give_back_takes_the_expiry_away_and_nodes_without_caps_are_not_patched(kube, setup, clock):
    controller, agent, metrics, _ = setup
    controller.apply(cap("GPU-0", 450.0), None)
    controller.apply(cap("GPU-1", 400.0), None)
    controller.apply(cap("GPU-0", 700.0, give_back=True), None)
    assert until(kube) == clock() + POWER_CAP_TTL_S   # GPU-1 still capped
    controller.apply(cap("GPU-1", 700.0, give_back=True), None)
    assert until(kube) is None and UNTIL_KEY not in kube.get("nodes", "n1")["metadata"]["annotations"]
    before = node_patches(kube)
    clock.advance(POWER_CAP_TTL_S)
    assert controller.housekeeping() == [] and node_patches(kube) == before


def test_an_expiry_that_is_no_time_keeps_the_limits_and_fails_the_sync(kube, setup, clock):
    controller, agent, metrics, reg = setup
    controller.apply(cap("GPU-0", 450.0), None)
    sync_once(agent, metrics)
    kube.mutate("nodes", "n1", "", {"metadata": {"annotations": {UNTIL_KEY: "tomorrow"}}})
    assert sync_once(agent, metrics) == {} and agent.target.power_limits()["GPU-0"].current_w == 450.0
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 1
    controller.housekeeping()   # the controller writes a good one
    sync_once(agent, metrics)
    assert reg.get_sample_value("gputide_power_cap_agent_syncs_total", {"result": "failed"}) == 1


NOW, TTL = 1_700_000_000.0, 900.0


def annotated(caps: str | None, until_value: str | None) -> dict:
    annotations = {k: v for k, v in ((POWER_CAP_ANNOTATION, caps), (UNTIL_KEY, until_value)) if v is not None}
    return {"metadata": {"name": "n1", "annotations": annotations}}


RENEWED = {"metadata": {"annotations": {UNTIL_KEY: rfc3339(NOW + TTL)}}}


@pytest.mark.parametrize(("node_obj", "patch"), [
    pytest.param(annotated(None, None), None, id="no caps, no expiry: nothing to do"),
    pytest.param(annotated('{"GPU-0": 450}', rfc3339(NOW + TTL / 2 + 1)), None, id="more than half the TTL left"),
    pytest.param(annotated('{"GPU-0": 450}', rfc3339(NOW + TTL / 2)), RENEWED, id="half the TTL left: renewed"),
    pytest.param(annotated('{"GPU-0": 450}', rfc3339(NOW - 60)), RENEWED, id="passed: renewed"),
    pytest.param(annotated('{"GPU-0": 450}', None), RENEWED, id="an older controller's caps: given an expiry"),
    pytest.param(annotated('{"GPU-0": 450}', "soon"), RENEWED, id="an expiry that is no time: written again"),
    pytest.param(annotated('{"GPU-0": {"restore": 450}}', rfc3339(NOW)),
                 {"metadata": {"annotations": {UNTIL_KEY: None}}}, id="only give-backs left: the expiry removed"),
    pytest.param(annotated('{"GPU-0": 4', None), None, id="caps that are not JSON: left to the agent"),
])
def test_power_caps_renewal(node_obj, patch):
    assert power_caps_renewal(node_obj, POWER_CAP_ANNOTATION, NOW, TTL) == patch


def test_a_shards_controller_renews_only_its_own_nodes_caps(kube, api, setup, clock):
    """Another shard's caps are that shard's controller's to renew: dead, its caps lapse whoever else lives."""
    controller, *_ = setup
    controller.apply(cap("GPU-0", 450.0), None)
    controller.apply(SetPowerLimit(reason="hot", gpu=2, uuid="GPU-2", node="n2", watts=450.0, previous_watts=700.0),
                     None)
    shard = KubernetesActuator(api, sleep=lambda s: None, clock=clock, power_cap_nodes=lambda name: name == "n1")
    clock.advance(POWER_CAP_TTL_S - 60)
    assert shard.housekeeping() == [f"n1: power caps renewed until {rfc3339(clock() + POWER_CAP_TTL_S)}"]
    n2_until = parse_time(kube.get("nodes", "n2")["metadata"]["annotations"][UNTIL_KEY])
    assert until(kube) == clock() + POWER_CAP_TTL_S and n2_until == clock() + 60   # n2's left to its own shard
