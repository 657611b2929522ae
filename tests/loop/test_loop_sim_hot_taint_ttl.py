"""The simulator's hot taint expires as the Kubernetes one does, so `gputide simulate`, the soak and the demo
exercise hot-taint renewal. `SimActuator` writes the taint (and each renewal) with an expiry `HOT_TAINT_TTL_S` after
the write (`SimCluster.hot_until`), the snapshot carries it (`Node.hot_until`) for the planner to renew, and the
actuator's housekeeping (and `recover`) removes a taint whose expiry has passed. Before, simulated taints never
expired: nothing in the simulator renewed one, and a dead controller's taint stayed for good."""

from __future__ import annotations

import io
import json

from loop_helpers import make_fleet
from prometheus_client import CollectorRegistry

from balancer.actions import HOT_TAINT_TTL_S
from balancer.actuate.base import Outcome
from balancer.actuate.sim import SimActuator
from balancer.loop import JsonlAudit, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import TaintNode
from balancer.plan.planner import RENEW_WITHIN_S
from balancer.sim import TAINT, ServiceSpec, SimCluster
from balancer.telemetry.sim import SimTelemetrySource


def cluster(nodes: int = 2) -> SimCluster:
    """n0 (A100) holds svc's replicas; n1 an L40S node svc may not use, so nothing moves off a hot n0, yet n0 is not
    the last node open to GPU work (that one is never tainted: `hotspot_detect.kept_open`)."""
    sim = SimCluster(make_fleet(nodes, 4, models=["A100-SXM4-80GB", "L40S"][:nodes]), seed=1, step_s=60.0)
    sim.add_service(ServiceSpec(name="svc", replicas=4, demand=lambda t: 80.0, gpu_memory_mib=16384,
                                allowed_models=frozenset({"A100-SXM4-80GB"})))
    sim.schedule()
    return sim


def taint(sim: SimCluster, **kw) -> str:
    result = SimActuator(sim).apply(TaintNode(reason="test", node="n0", **kw), sim.snapshot())
    assert result.outcome is Outcome.APPLIED
    return result.detail


def n0(sim: SimCluster):
    return sim.snapshot().nodes[0]


def test_a_taint_carries_its_expiry_into_the_snapshot_and_a_renewal_writes_a_fresh_one():
    sim = cluster()
    assert taint(sim) == f"added taint gputide.io/hot on n0 until t={sim.time + HOT_TAINT_TTL_S:.0f} s"
    assert TAINT in n0(sim).taints and n0(sim).hot_until == sim.time + HOT_TAINT_TTL_S
    sim.advance_to(sim.time + 600)
    assert taint(sim, renew=True).startswith("renewed taint gputide.io/hot on n0 until")
    assert n0(sim).hot_until == sim.time + HOT_TAINT_TTL_S
    assert taint(sim, remove=True) == "removed taint gputide.io/hot on n0"
    assert TAINT not in n0(sim).taints and n0(sim).hot_until is None and not sim.hot_until
    assert taint(sim, renew=True).startswith("added")   # a renewal of a taint already gone puts it back


def test_housekeeping_removes_a_taint_once_its_expiry_has_passed_and_not_before():
    sim = cluster()
    taint(sim)
    actuator, until = SimActuator(sim), sim.hot_until["n0"]
    sim.advance_to(until - 60)
    assert actuator.housekeeping() == [] and sim.has_taint("n0")
    sim.advance_to(until)
    assert actuator.housekeeping() == ["n0: hot taint expired"]
    assert not sim.has_taint("n0") and n0(sim).hot_until is None and TAINT not in n0(sim).taints


def test_a_successors_recover_removes_a_dead_controllers_expired_taint():
    sim = cluster()
    taint(sim)
    sim.advance_to(sim.time + HOT_TAINT_TTL_S)
    assert SimActuator(sim).recover() == ["n0: hot taint expired"] and not sim.has_taint("n0")


def test_a_taint_written_without_an_expiry_never_expires():
    sim = cluster()
    sim.add_taint("n0")   # not gputide's actuator: no expiry, as a Kubernetes taint without gputide.io/hot-until
    sim.advance_to(sim.time + 3 * HOT_TAINT_TTL_S)
    assert SimActuator(sim).housekeeping() == [] and sim.has_taint("n0") and n0(sim).hot_until is None


def test_a_node_hot_for_an_hour_keeps_its_taint_at_every_reading_through_renewals():
    """The real loop on the simulator: once tainted, n0 shows the taint at every reading while its cooling stays
    broken (no other node its pods may move to); each renewal comes when the expiry is within half the TTL;
    housekeeping never finds it expired."""
    sim = cluster()
    sim.degrade_cooling("n0", inlet_rise_c=40.0)
    audit = io.StringIO()
    rec = Reconciler(source=SimTelemetrySource(sim), actuator=SimActuator(sim), clock=lambda: sim.time,
                     metrics=ControllerMetrics(CollectorRegistry()), audit=JsonlAudit(audit))
    shown, details = [], []
    for _ in range(70):
        sim.step()
        report = rec.run_once()
        shown.append(sim.has_taint("n0"))
        details += [r.detail for r in report.results if r.action.kind == "taint_node"]
    first = shown.index(True)
    assert all(shown[first:]) and first < 10
    assert details[0].startswith("added") and len(details) > 1
    assert all(d.startswith("renewed taint gputide.io/hot on n0") for d in details[1:])
    period = int(-(-(HOT_TAINT_TTL_S - RENEW_WITHIN_S) // sim.step_s))   # every 8 readings of 60 s
    assert len(details) - 1 == (len(shown) - first - 1) // period
    records = [json.loads(line) for line in audit.getvalue().splitlines()]
    assert not [r for r in records if "expired" in r.get("reason", "")]
