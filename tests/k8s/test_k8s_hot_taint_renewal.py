"""The hot taint's expiry through the Kubernetes API (the fake API server): the controller reads each node's
`gputide.io/hot-until` back (`KubernetesNodes` -> `Node.hot_until`), renews the taint of a node still hot before it
passes, and leaves it to expire once the controller is gone. Before, nothing renewed it: a node hot for longer than
the TTL lost its taint to housekeeping and took new pods for a cycle until the planner tainted it again."""

from __future__ import annotations

import io
import json
from dataclasses import replace

import pytest
from fakeapi import FakeKube, node
from prometheus_client import CollectorRegistry

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_nodes import KubernetesNodes, node_meta
from balancer.actuate.kubernetes import HOT_TAINT_KEY, HOT_UNTIL_ANNOTATION, parse_time, rfc3339
from balancer.loop import JsonlAudit, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import ClusterSnapshot
from tests.loop.loop_helpers import make_fleet, snapshot, workload
from tests.telemetry.test_telemetry_prometheus_unit import FakeClient, source

FL = make_fleet(2, 4)   # A100: slowdown 89 C
HOT, COOL = 86.0, 60.0
INTERVAL_S = 60.0


class KubeFleet:
    """GPU 0 (n0) at the temperature the test sets, the nodes' taints and hot-until as the API server has them at
    each read (listed every time, as a synced watch would show them); records whether n0 showed the taint."""

    def __init__(self, api, clock) -> None:
        self.nodes = KubernetesNodes(api, ttl_s=0.0, clock=clock, sleep=lambda s: None)
        self.clock, self.temp, self.shown = clock, HOT, []

    def snapshot(self) -> ClusterSnapshot:
        meta = self.nodes()
        nodes = [replace(n, labels=m.labels, taints=m.taints, power_caps=m.power_caps, hot_until=m.hot_until)
                 if (m := meta.get(n.name)) else n for n in FL.nodes]
        self.shown.append(any(t.startswith(HOT_TAINT_KEY + "=") for t in nodes[0].taints))
        return snapshot(FL, workloads=[(workload("svc-0", movable=False), (0,))], temps={0: self.temp},
                        nodes=nodes, time=self.clock())


@pytest.fixture
def fleet(kube: FakeKube, api, clock) -> KubeFleet:
    kube.add(node("n0", 4, model="A100"))
    kube.add(node("n1", 4, model="A100"))
    return KubeFleet(api, clock)


def controller(api, clock, fleet: KubeFleet, audit: io.StringIO) -> Reconciler:
    actuator = KubernetesActuator(api, clock=clock, sleep=lambda s: None)
    return Reconciler(source=fleet, actuator=actuator, clock=clock, audit=JsonlAudit(audit),
                      metrics=ControllerMetrics(CollectorRegistry()))


def cycles(rec: Reconciler, clock, n: int) -> list[str]:
    """`n` cycles `INTERVAL_S` apart; the details of the taint actions each applied."""
    done = []
    for _ in range(n):
        clock.advance(INTERVAL_S)
        report = rec.run_once()
        done += [r.detail for r in report.results if r.action.kind == "taint_node" and r.action.node == "n0"]
    return done


def hot_until(kube: FakeKube) -> float | None:
    return parse_time((kube.get("nodes", "n0")["metadata"].get("annotations") or {}).get(HOT_UNTIL_ANNOTATION))


def has_taint(kube: FakeKube) -> bool:
    return any(t["key"] == HOT_TAINT_KEY for t in kube.get("nodes", "n0")["spec"].get("taints") or ())


def tainted_for_40_minutes(kube: FakeKube, api, clock, fleet: KubeFleet, audit: io.StringIO):
    rec = controller(api, clock, fleet, audit)
    first = cycles(rec, clock, 2)   # hotReadings: tainted on the second reading
    assert first == [f"added taint {HOT_TAINT_KEY} on n0 until {rfc3339(clock() + HOT_TAINT_TTL_S)}"]
    start = len(fleet.shown)
    details, after_each = [], []
    for _ in range(40):
        details += cycles(rec, clock, 1)
        after_each.append(has_taint(kube))
    return rec, details, fleet.shown[start:], after_each


def test_a_node_hot_for_40_minutes_keeps_its_taint_through_every_cycle(kube: FakeKube, api, clock, fleet):
    audit = io.StringIO()
    _, details, shown, after_each = tainted_for_40_minutes(kube, api, clock, fleet, audit)
    assert all(shown) and all(after_each)
    assert details and all(d.startswith(f"renewed taint {HOT_TAINT_KEY} on n0 until ") for d in details)
    assert hot_until(kube) - clock() > HOT_TAINT_TTL_S / 2   # the expiry in force was written by a renewal
    records = [json.loads(line) for line in audit.getvalue().splitlines()]
    assert not [r for r in records if "expired" in r["reason"]]   # housekeeping never found it expired
    renewed = [r for r in records if r["action"] == "taint_node" and r["detail"].startswith("renewed")]
    assert len(renewed) == len(details) and all(r["outcome"] == "applied" for r in renewed)
    # no request ever took the taint off n0; one Event (the taint), none for the renewals
    patches = [r.body for r in kube.requests if r.method == "PATCH" and r.path.endswith("/nodes/n0")]
    assert all(HOT_TAINT_KEY in json.dumps(p["spec"]["taints"]) for p in patches if "taints" in p.get("spec", {}))
    events = [r for r in kube.requests if r.method == "POST" and r.path.endswith("/events")]
    assert [e.body["reason"] for e in events if e.body["involvedObject"]["name"] == "n0"].count("GputideTainted") == 1


def test_a_node_that_cooled_loses_its_taint_and_is_not_renewed(kube: FakeKube, api, clock, fleet):
    rec, *_ = tainted_for_40_minutes(kube, api, clock, fleet, io.StringIO())
    fleet.temp = COOL
    details = cycles(rec, clock, 20)
    assert details[-1] == f"removed taint {HOT_TAINT_KEY} on n0"
    assert all(d.startswith("renewed") for d in details[:-1])   # only while the hysteresis still counts it hot
    assert not has_taint(kube) and hot_until(kube) is None


def taint_notes(notes: list[str]) -> list[str]:
    """The notes about taints (the successor also renews the expiry of n0's power caps: the hot GPU is throttled)."""
    return [n for n in notes if "power caps" not in n]


def test_a_dead_controllers_taint_still_expires(kube: FakeKube, api, clock, fleet):
    """The controller stops while n0 is hot; a successor's `recover` removes the taint once the expiry of the last
    renewal has passed, at most one TTL after the controller's last cycle."""
    tainted_for_40_minutes(kube, api, clock, fleet, io.StringIO())
    died, until = clock(), hot_until(kube)
    assert died < until <= died + HOT_TAINT_TTL_S
    successor = KubernetesActuator(api, clock=clock, sleep=lambda s: None)
    clock.advance(until - died - 1)
    assert taint_notes(successor.recover()) == [] and has_taint(kube)
    clock.advance(1)
    assert taint_notes(successor.recover()) == ["n0: hot taint expired"]
    assert not has_taint(kube) and hot_until(kube) is None


def test_the_snapshot_carries_each_nodes_hot_taint_expiry(kube: FakeKube, api, clock):
    a = node("node-a")
    a["metadata"]["annotations"] = {HOT_UNTIL_ANNOTATION: "2026-12-04T14:00:00Z"}
    a["spec"]["taints"] = [{"key": HOT_TAINT_KEY, "value": "true", "effect": "NoSchedule"}]
    kube.add(a)
    kube.add(node("node-b"))
    assert node_meta(kube.get("nodes", "node-a")).hot_until == parse_time("2026-12-04T14:00:00Z")
    src = source(FakeClient())
    src.node_overrides = KubernetesNodes(api, clock=clock, sleep=lambda s: None)
    by = {n.name: n for n in src.snapshot().nodes}
    assert by["node-a"].hot_until == parse_time("2026-12-04T14:00:00Z") and by["node-b"].hot_until is None
