"""While the controller holds still for fail-static (telemetry stale, missing or invalid) it keeps the power caps it
already set: the leader renews their expiry (`gputide.io/power-caps-until`) through the Kubernetes actuator's
`keep_power_caps`, and writes nothing else. Before, a hold skipped housekeeping, where the renewal runs, so after
about 15 minutes of fail-static each node's agent gave its caps back: a change made on telemetry nobody trusts (a
hot GPU losing its cap). Under an emergency stop nothing is renewed (the operator said stop acting: the caps lapse as
a stopped controller's), and the log says so once per stop. Real Reconciler, real actuator, the fake API server and
the power-cap agent on the fake NVML, end to end."""

from __future__ import annotations

import json
import logging

import pytest
from fakeapi import FakeKube, node
from prometheus_client import CollectorRegistry
from test_k8s_actuator import SNAP

from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import POWER_CAP_TTL_S, NodeAnnotationCaps, caps_until_key, power_caps_kept
from balancer.actuate.kubernetes import (
    HOT_TAINT_KEY,
    HOT_UNTIL_ANNOTATION,
    POWER_CAP_ANNOTATION,
    RESERVATION_ANNOTATION,
    parse_time,
    rfc3339,
)
from balancer.cmd.power_cap_agent import AgentMetrics, sync_once
from balancer.config import BalancerPolicy
from balancer.errors import StaleTelemetry
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Plan, SetPowerLimit
from balancer.safety import SafetyGuard
from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import PowerCapAgent

UNTIL_KEY = caps_until_key(POWER_CAP_ANNOTATION)
INTERVAL_S = 30.0
COUNTER = "gputide_power_caps_renewed_holding_still_total"


class Source:
    """Telemetry that is stale while `stale` is set, else a fresh snapshot."""

    def __init__(self) -> None:
        self.stale = True

    def snapshot(self):
        if self.stale:
            raise StaleTelemetry("oldest sample is 600 s old")
        return SNAP.replace(sample_age_s=[0.0] * SNAP.n_gpus)


@pytest.fixture
def world(kube: FakeKube, api, clock, tmp_path):
    """(reconciler, actuator, source, agent, agent metrics, stop file): n1 and n2 of two GPUs, nothing capped yet."""
    kube.add(node("n1", 2))
    kube.add(node("n2", 2))
    metrics = ControllerMetrics()
    actuator = KubernetesActuator(api, sleep=lambda s: None, clock=clock, registry=metrics.registry)
    planned = []

    def planner(snapshot, forecasts, policy, state):   # never asked while holding still
        planned.append(snapshot)
        return Plan(actions=()), state

    source, stop_file = Source(), tmp_path / "stop"
    rec = Reconciler(source=source, actuator=actuator, clock=clock, metrics=metrics, planner=planner,
                     guard=SafetyGuard(BalancerPolicy().safety, emergency_stop_file=stop_file))
    agent = PowerCapAgent(NodeAnnotationCaps(api, "n1", sleep=lambda s: None),
                          NvmlBackend(nvml=FakeNvml([FakeDevice(uuid=f"GPU-{i}", minor=i,
                                                                bus_id=f"00000000:{i:02x}:00.0") for i in range(2)]),
                                      hostname="n1"), clock=clock)
    rec.planned = planned
    return rec, actuator, source, agent, AgentMetrics(CollectorRegistry()), stop_file


def cap(actuator: KubernetesActuator, uuid: str = "GPU-0", node_name: str = "n1", watts: float = 450.0) -> None:
    action = SetPowerLimit(reason="hot", gpu=0, uuid=uuid, node=node_name, watts=watts, previous_watts=700.0)
    assert actuator.apply(action, None).outcome == "applied"


def annotations(kube: FakeKube, name: str = "n1") -> dict:
    return dict(kube.get("nodes", name)["metadata"].get("annotations") or {})


def node_patches(kube: FakeKube) -> list[tuple[str, dict]]:
    return [(r.path.rsplit("/", 1)[-1], r.body) for r in kube.requests if r.method == "PATCH" and "/nodes/" in r.path]


def cycles(rec: Reconciler, clock, seconds: float, agent=None, agent_metrics=None) -> list[float]:
    """Reconcile cycles `INTERVAL_S` apart, each held still; GPU-0's limit after the agent's sync, each cycle."""
    limits = []
    for _ in range(int(seconds // INTERVAL_S)):
        clock.advance(INTERVAL_S)
        report = rec.run_once()
        assert report.status == "fail_static"
        if agent is not None:
            sync_once(agent, agent_metrics)
            limits.append(agent.target.power_limits()["GPU-0"].current_w)
    return limits


def test_an_hour_of_fail_static_keeps_the_caps_by_renewing_their_expiry_and_touches_nothing_else(
        kube, world, clock, caplog):
    rec, actuator, source, agent, agent_metrics, _ = world
    cap(actuator)
    rec.run_once()   # the first cycle as leader holds still too: `keep_power_caps` only (`recover` waits)
    sync_once(agent, agent_metrics)
    assert agent.target.power_limits()["GPU-0"].current_w == 450.0
    # what housekeeping would act on: an expired hot taint and reservation on n1, an expiry left without caps on n2
    kube.mutate("nodes", "n1", "", {
        "spec": {"taints": [{"key": HOT_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]},
        "metadata": {"annotations": {HOT_UNTIL_ANNOTATION: rfc3339(clock() - 1),
                                     RESERVATION_ANNOTATION: json.dumps({"web": {"expires": rfc3339(clock() - 1)}})}}})
    kube.mutate("nodes", "n2", "", {"metadata": {"annotations": {UNTIL_KEY: rfc3339(clock() - 1)}}})
    n1_before, n2_before, taints = annotations(kube), annotations(kube, "n2"), kube.get("nodes", "n1")["spec"]
    caps = n1_before[POWER_CAP_ANNOTATION]
    patches = len(node_patches(kube))

    with caplog.at_level(logging.INFO, logger="balancer.loop"):
        limits = cycles(rec, clock, 3600, agent, agent_metrics)

    assert set(limits) == {450.0}   # never given back
    assert rec.planned == []        # nothing planned, so nothing applied
    renewals = node_patches(kube)[patches:]
    # only n1's expiry, about twice per TTL (not a patch every cycle), nothing else in any patch
    assert 3600 / POWER_CAP_TTL_S * 2 - 1 <= len(renewals) <= 3600 / (POWER_CAP_TTL_S / 2) + 1
    assert {name for name, _ in renewals} == {"n1"}
    assert all(set(body["metadata"]) == {"annotations", "resourceVersion"} and set(body) == {"metadata"}
               and set(body["metadata"]["annotations"]) == {UNTIL_KEY} for _, body in renewals)
    after = annotations(kube)
    assert after[POWER_CAP_ANNOTATION] == caps   # the cap's value is unchanged
    assert parse_time(after[UNTIL_KEY]) > clock() + POWER_CAP_TTL_S / 2 - INTERVAL_S
    assert {k: v for k, v in after.items() if k != UNTIL_KEY} == {k: v for k, v in n1_before.items() if k != UNTIL_KEY}
    assert kube.get("nodes", "n1")["spec"] == taints and annotations(kube, "n2") == n2_before
    assert rec.metrics.registry.get_sample_value(COUNTER) == len(renewals)
    said = [r.getMessage() for r in caplog.records if "keep_power_caps" in r.getMessage()]
    assert len(said) == len(renewals)
    assert all("holding still (stale_telemetry): only the expiry of the power caps already set is renewed" in s
               and "n1: power caps renewed until" in s for s in said)


def test_fail_static_never_writes_a_cap_nor_an_expiry_where_none_is_due(kube, world, clock):
    """Caps with an expiry to come on n1 are kept; nothing else changes: n2's caps without an expiry (an older
    controller's, which do not lapse) get none, n3's expiry that has passed (its caps given back, or about to be) is
    not renewed (that would apply them again), n4's give-backs keep their expiry, n5 without caps gets nothing; no
    cap is ever written, whatever the nodes hold."""
    rec, actuator, source, *_ = world
    rec.run_once()   # every cycle holds still (the first's `recover` waits for one that plans)
    cap(actuator)
    kube.add(node("n3", 2))
    kube.add(node("n4", 2))
    kube.add(node("n5", 2))
    kube.mutate("nodes", "n2", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"GPU-2": 400}'}}})
    kube.mutate("nodes", "n3", "", {"metadata": {"annotations": {POWER_CAP_ANNOTATION: '{"GPU-4": 400}',
                                                                 UNTIL_KEY: rfc3339(clock() - 1)}}})
    kube.mutate("nodes", "n4", "", {"metadata": {"annotations": {
        POWER_CAP_ANNOTATION: '{"GPU-6": {"restore": 700}}', UNTIL_KEY: rfc3339(clock() + 100)}}})
    before = {n: annotations(kube, n) for n in ("n2", "n3", "n4", "n5")}
    patches = len(node_patches(kube))
    cycles(rec, clock, 2 * POWER_CAP_TTL_S)
    assert {n: annotations(kube, n) for n in ("n2", "n3", "n4", "n5")} == before
    written = node_patches(kube)[patches:]
    assert written and {name for name, _ in written} == {"n1"}
    assert not any(POWER_CAP_ANNOTATION in body["metadata"].get("annotations", {}) for _, body in written)

    # a replica whose reads outlived its Lease renews nothing either: the caps are the new leader's to keep
    rec.elector = LosesWhileReading()
    patches = len(node_patches(kube))
    clock.advance(POWER_CAP_TTL_S / 2)
    rec.run_once()
    assert node_patches(kube)[patches:] == []


class LosesWhileReading:
    """Holds the Lease when a cycle begins, has lost it by the time the reading failed."""

    def __init__(self) -> None:
        self.asks = 0

    def try_acquire(self, now: float) -> bool:
        self.asks += 1
        return self.asks % 2 == 1

    def release(self) -> None:
        pass


NOW, TTL = 1_700_000_000.0, 900.0


def annotated(caps: str | None, until_value: str | None) -> dict:
    a = {k: v for k, v in ((POWER_CAP_ANNOTATION, caps), (UNTIL_KEY, until_value)) if v is not None}
    return {"metadata": {"name": "n1", "annotations": a}}


@pytest.mark.parametrize(("node_obj", "patch"), [
    pytest.param(annotated('{"GPU-0": 450}', rfc3339(NOW + TTL / 2)),
                 {"metadata": {"annotations": {UNTIL_KEY: rfc3339(NOW + TTL)}}}, id="half the TTL left: renewed"),
    pytest.param(annotated('{"GPU-0": 450}', rfc3339(NOW + TTL / 2 + 1)), None, id="more than half left"),
    pytest.param(annotated('{"GPU-0": 450}', rfc3339(NOW)), None, id="passed: not renewed (no cap revived)"),
    pytest.param(annotated('{"GPU-0": 450}', None), None, id="no expiry: none written"),
    pytest.param(annotated('{"GPU-0": 450}', "soon"), None, id="an expiry that is no time: left"),
    pytest.param(annotated('{"GPU-0": {"restore": 450}}', rfc3339(NOW + 1)), None, id="only give-backs: kept"),
    pytest.param(annotated(None, rfc3339(NOW + 1)), None, id="no caps: expiry kept"),
    pytest.param(annotated('{"GPU-0": 4', rfc3339(NOW + 1)), None, id="caps that are not JSON: left"),
])
def test_power_caps_kept(node_obj, patch):
    assert power_caps_kept(node_obj, POWER_CAP_ANNOTATION, NOW, TTL) == patch


@pytest.mark.parametrize("stale", [False, True], ids=["fresh telemetry", "stale telemetry too"])
def test_an_emergency_stop_renews_nothing_so_the_caps_lapse_and_the_log_says_so_once_per_stop(
        kube, world, clock, caplog, stale):
    """An emergency stop is an operator saying stop acting: nothing is written, even while the telemetry is also bad
    (where fail-static alone would renew), so the caps lapse as a stopped controller's. Once the stop is cleared and
    the controller holds still for fail-static, it renews again; the next stop is told again."""
    rec, actuator, source, agent, agent_metrics, stop_file = world
    cap(actuator)
    rec.run_once()
    source.stale = stale
    stop_file.touch()
    patches = len(node_patches(kube))
    limits = []
    with caplog.at_level(logging.WARNING, logger="balancer.loop"):
        for _ in range(int((POWER_CAP_TTL_S + 120) // INTERVAL_S)):
            clock.advance(INTERVAL_S)
            assert rec.run_once().status == "fail_static"
            sync_once(agent, agent_metrics)
            limits.append(agent.target.power_limits()["GPU-0"].current_w)
    assert node_patches(kube)[patches:] == [] and limits[-1] == 700.0   # lapsed: the agent gave it back
    told = [r.getMessage() for r in caplog.records if "power caps gputide set are not renewed" in r.getMessage()]
    assert len(told) == 1 and told[0].startswith("emergency stop:")
    assert rec.metrics.registry.get_sample_value(COUNTER) == 0

    # the stop cleared, still blind: a fresh cap (as the next planning cycle would write) is kept again
    stop_file.unlink()
    source.stale = True
    cap(actuator, watts=420.0)
    cycles(rec, clock, POWER_CAP_TTL_S)
    assert rec.metrics.registry.get_sample_value(COUNTER) >= 1
    stop_file.touch()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="balancer.loop"):
        cycles(rec, clock, 3 * INTERVAL_S)
    assert len([r for r in caplog.records if "are not renewed" in r.getMessage()]) == 1

