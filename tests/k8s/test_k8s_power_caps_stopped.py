"""A new leader's first cycle writes under a hold no more than an old leader's hold does, and a node under its own
emergency stop keeps no cap alive (the fake API server, the power-cap agent on the fake NVML, the real Reconciler and
actuator).

Before, `recover()` ran on a new leader's first cycle before the telemetry was read or the emergency stop asked: under
an emergency stop it renewed caps and released taints (the operator said stop acting), and under fail-static it also
renewed caps whose expiry had passed, applying again caps an agent had already given back, on telemetry nobody
trusted. `recover()` now waits for the leader's first cycle that plans; a hold does what it does for an old leader
(fail-static: `keep_power_caps`, an expiry still to come renewed and nothing else; an emergency stop: nothing). And
housekeeping (and `keep_power_caps`) renewed the caps of a node labelled `gputide.io/emergency-stop=true`, keeping
gputide's throttles there in force for good against the label; now they lapse, as under the global stop, and the log
says so once per node and stop. The node's expired hot taint and reservations are still released: their expiry running
out is not an action (gputide renews neither there)."""

from __future__ import annotations

import json
import logging

import pytest
from fakeapi import FakeKube, node
from prometheus_client import CollectorRegistry
from test_k8s_power_caps_held_still import (
    COUNTER,
    INTERVAL_S,
    UNTIL_KEY,
    Source,
    annotations,
    cap,
    node_patches,
)

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S, NodeAnnotationCaps, node_stopped
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    HOT_UNTIL_ANNOTATION,
    RESERVATION_ANNOTATION,
    parse_time,
    rfc3339,
)
from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from balancer.config import BalancerPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Plan
from balancer.safety import EMERGENCY_LABEL, SafetyGuard
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import EXPIRY_MARGIN_S, PowerCapAgent

STOP = {EMERGENCY_LABEL: "true"}


@pytest.fixture
def fleet(kube: FakeKube, api, clock):
    """(actuator, agent on n1, its metrics, the controller's metrics): n1 and n2 of two GPUs each, nothing capped."""
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    metrics = ControllerMetrics()
    actuator = KubernetesActuator(api, sleep=lambda s: None, clock=clock, registry=metrics.registry)
    agent = PowerCapAgent(NodeAnnotationCaps(api, "n1", sleep=lambda s: None),
                          NvmlBackend(nvml=FakeNvml([FakeDevice(uuid=f"GPU-{i}", minor=i,
                                                                bus_id=f"00000000:{i:02x}:00.0") for i in range(2)]),
                                      hostname="n1"), clock=clock)
    return actuator, agent, AgentMetrics(CollectorRegistry()), metrics


def limit(agent, agent_metrics) -> float:
    sync_once(agent, agent_metrics)
    return agent.target.power_limits()["GPU-0"].current_w


def taint_and_reservation(kube: FakeKube, name: str, until: float) -> None:
    kube.mutate("nodes", name, "", {
        "spec": {"taints": [{"key": HOT_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]},
        "metadata": {"annotations": {HOT_UNTIL_ANNOTATION: rfc3339(until),
                                     RESERVATION_ANNOTATION: json.dumps({"web": {"expires": rfc3339(until)}})}}})


def has_taint(kube: FakeKube, name: str = "n1") -> bool:
    return any(t["key"] == HOT_TAINT_KEY for t in kube.get("nodes", name)["spec"].get("taints") or ())


def left_behind(kube, clock, fleet) -> None:
    """What an old leader left when it stopped: n1's cap at 450 W, whose expiry has passed (its agent gave it back),
    with a hot taint and a reservation expired too; n2's cap, whose expiry is still to come but due for renewal."""
    actuator, agent, agent_metrics, _ = fleet
    cap(actuator)
    assert limit(agent, agent_metrics) == 450.0
    clock.advance(POWER_CAP_TTL_S + EXPIRY_MARGIN_S + INTERVAL_S)
    assert limit(agent, agent_metrics) == 700.0   # lapsed: given back
    taint_and_reservation(kube, "n1", clock() - 60)
    cap(actuator, uuid="GPU-2", node_name="n2")
    kube.mutate("nodes", "n2", "", {"metadata": {"annotations": {UNTIL_KEY: rfc3339(clock() + 100)}}})


def new_leader(fleet, clock, stop_file) -> Reconciler:
    def planner(snapshot, forecasts, policy, state):
        return Plan(actions=()), state

    return Reconciler(source=Source(), actuator=fleet[0], clock=clock, metrics=fleet[3], planner=planner,
                      guard=SafetyGuard(BalancerPolicy().safety, emergency_stop_file=stop_file))


@pytest.mark.parametrize("stale", [False, True], ids=["fresh telemetry", "stale telemetry too"])
def test_a_new_leaders_first_cycles_under_an_emergency_stop_write_nothing_and_it_recovers_once_the_stop_clears(
        kube, fleet, clock, tmp_path, caplog, stale):
    actuator, agent, agent_metrics, _ = fleet
    left_behind(kube, clock, fleet)
    stop_file = tmp_path / "stop"
    stop_file.touch()
    rec = new_leader(fleet, clock, stop_file)
    rec.source.stale = stale
    before, patches = {n: annotations(kube, n) for n in ("n1", "n2")}, len(node_patches(kube))
    for _ in range(3):
        assert rec.run_once().status == "fail_static"
        clock.advance(INTERVAL_S)
    assert node_patches(kube)[patches:] == []   # no cap revived or renewed, no taint or reservation released
    assert {n: annotations(kube, n) for n in ("n1", "n2")} == before and has_taint(kube)
    assert limit(agent, agent_metrics) == 700.0

    # the stop cleared, fresh telemetry: the first cycle that plans recovers (once), as a new leader always did
    stop_file.unlink()
    rec.source.stale = False
    with caplog.at_level(logging.WARNING, logger="balancer.loop"):
        assert rec.run_once().status == "ok"
        rec.run_once()
    recovered = [r.getMessage() for r in caplog.records if r.getMessage().startswith("recover: ")]
    assert any("n1: power caps had expired" in m for m in recovered)
    assert "recover: n1: hot taint expired" in recovered and len(recovered) == 4   # n1's 3 notes, n2's renewal
    assert not has_taint(kube) and limit(agent, agent_metrics) == 450.0


def test_a_new_leaders_first_cycle_under_fail_static_only_keeps_the_caps_that_have_not_lapsed(
        kube, fleet, clock, tmp_path):
    """Under fail-static the first cycle renews n2's expiry still to come (`keep_power_caps`) and nothing else: n1's
    lapsed cap is not applied again on telemetry nobody trusts, and its expired hot taint and reservation stay, as an
    old leader's hold leaves them (opening a node once judged hot is a change, like a cap lapsing)."""
    actuator, agent, agent_metrics, _ = fleet
    left_behind(kube, clock, fleet)
    rec = new_leader(fleet, clock, tmp_path / "stop")
    n1, patches = annotations(kube), len(node_patches(kube))
    assert rec.run_once().status == "fail_static"
    written = node_patches(kube)[patches:]
    assert [(name, set(body["metadata"]["annotations"])) for name, body in written] == [("n2", {UNTIL_KEY})]
    assert parse_time(annotations(kube, "n2")[UNTIL_KEY]) == clock() + POWER_CAP_TTL_S
    assert rec.metrics.registry.get_sample_value(COUNTER) == 1
    assert annotations(kube) == n1 and has_taint(kube) and limit(agent, agent_metrics) == 700.0

    rec.source.stale = False
    clock.advance(INTERVAL_S)
    assert rec.run_once().status == "ok"   # recovered now: the planner counts n1's GPU capped, so its cap is renewed
    assert not has_taint(kube) and RESERVATION_ANNOTATION not in annotations(kube)
    assert limit(agent, agent_metrics) == 450.0


def test_a_node_under_its_own_emergency_stop_has_no_cap_renewed_so_they_lapse_and_the_log_says_so_once(
        kube, fleet, clock, caplog):
    """Housekeeping renews n2's caps and not n1's, labelled: n1's agent gives them back once their expiry passes.
    Its expired hot taint is still released. The label taken away, the next housekeeping renews n1's caps again."""
    actuator, agent, agent_metrics, _ = fleet
    cap(actuator)
    cap(actuator, uuid="GPU-2", node_name="n2")
    kube.mutate("nodes", "n1", "", {"metadata": {"labels": {EMERGENCY_LABEL: "True"}}})
    taint_and_reservation(kube, "n1", clock() + 600)
    limits = []
    with caplog.at_level(logging.WARNING, logger="balancer.actuate.k8s_actuator"):
        for _ in range(int((POWER_CAP_TTL_S + EXPIRY_MARGIN_S + INTERVAL_S) // INTERVAL_S)):
            clock.advance(INTERVAL_S)
            notes = actuator.housekeeping()
            assert not any(n.startswith("n1: power caps") for n in notes)
            limits.append(limit(agent, agent_metrics))
    assert limits[0] == 450.0 and limits[-1] == 700.0   # lapsed
    assert parse_time(annotations(kube, "n2")[UNTIL_KEY]) > clock()   # n2 kept
    assert not has_taint(kube)   # the taint's expiry ran out: released, as the label asks nothing to be kept
    told = [r.getMessage() for r in caplog.records if "emergency-stop label" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith("n1 carries the emergency-stop label: the power caps")

    kube.mutate("nodes", "n1", "", {"metadata": {"labels": {EMERGENCY_LABEL: None}}})
    clock.advance(INTERVAL_S)
    assert any(n.startswith("n1: power caps had expired") for n in actuator.housekeeping())
    assert limit(agent, agent_metrics) == 450.0


def test_keep_power_caps_renews_nothing_on_a_node_under_its_own_stop_nor_one_labelled_after_the_list(
        kube, fleet, clock):
    actuator, *_ = fleet
    cap(actuator)
    cap(actuator, uuid="GPU-2", node_name="n2")
    kube.mutate("nodes", "n2", "", {"metadata": {"labels": STOP}})
    clock.advance(POWER_CAP_TTL_S / 2)
    patches = len(node_patches(kube))
    kube.before("GET", r"/api/v1/nodes/n1(\?|$)",   # labelled between the list and the write's read
                lambda: kube.mutate("nodes", "n1", "", {"metadata": {"labels": STOP}}))
    assert actuator.keep_power_caps() == [] and actuator.housekeeping() == []
    assert node_patches(kube)[patches:] == []


@pytest.mark.parametrize(("labels", "stopped"), [
    ({EMERGENCY_LABEL: "true"}, True), ({EMERGENCY_LABEL: "TRUE"}, True), ({EMERGENCY_LABEL: "false"}, False),
    ({}, False), (None, False),
])
def test_node_stopped_reads_the_label_as_the_safety_guard_does(labels, stopped):
    assert node_stopped({"metadata": {"name": "n1", "labels": labels}}) is stopped
