"""Which nodes carry gputide's hot taint is what the node list says, not what the controller remembers doing. On
Kubernetes the taint expires (`gputide.io/hot-until`, 15 minutes after it was written; the actuator's housekeeping
removes it and nothing renews it), and a person may remove it. The planner counted a node it had tainted as tainted
until it removed the taint itself, so a node whose taint expired while its GPU stayed hot was never tainted again
and took new pods while hot. Now the node is tainted again on the next reading that shows it without the taint; a
taint applied last cycle still counts once, for a node list that has not caught up with the write yet."""

from __future__ import annotations

import pytest
from loop_helpers import make_fleet
from prometheus_client import CollectorRegistry
from scripted_fleet import HOT, Clock, N, ScriptedFleet, taint_changes

from balancer.actuate.sim import SimActuator
from balancer.config import BalancerPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.plan.planner import PlannerState, acknowledge, plan
from balancer.sim import ServiceSpec, SimCluster
from balancer.telemetry.sim import SimTelemetrySource


def tainting_planner(fleet: ScriptedFleet) -> PlannerState:
    """A controller that saw GPU 0 hot for `hotReadings` readings and tainted n0 (acknowledged)."""
    fleet.t0, state = HOT, PlannerState()
    for _ in range(N):
        p, state = plan(fleet.snapshot(), None, BalancerPolicy(), state)
    assert taint_changes(list(p.actions)) == [("n0", False)]
    return acknowledge(state, p.actions, fleet.snapshot())


CASES = {
    "the node shows the taint: nothing to do, however long": ([True] * 8, []),
    "the taint expired while the GPU is still hot: it is put back on the next reading": ([True] * 4 + [False], [4]),
    "removed again later: put back again": ([True, False, True, True, False, True], [1, 4]),
    "a node list that has not shown the new taint yet does not get it twice": ([False, True, True], []),
    "one that still does not show it a cycle later gets it again": ([False, False, True], [1]),
}


@pytest.mark.parametrize("shown, tainted_at", CASES.values(), ids=CASES.keys())
def test_a_hot_node_without_the_taint_is_tainted_again(shown, tainted_at):
    fleet = ScriptedFleet(Clock())
    state = tainting_planner(fleet)
    seen = []
    for i, carries in enumerate(shown):   # GPU 0 stays hot throughout
        fleet.tainted = carries
        p, state = plan(fleet.snapshot(), None, BalancerPolicy(), state)
        changes = taint_changes(list(p.actions))
        assert ("n0", True) not in changes, f"reading {i} removed the taint of a hot node"
        seen += [i] * changes.count(("n0", False))
        state = acknowledge(state, p.actions, fleet.snapshot())   # applied, as the loop would
    assert seen == tainted_at


def test_a_running_controller_taints_again_a_hot_node_whose_taint_expired():
    """End to end against the simulator: the node's taint is removed as an expiry removes it, while its cooling is
    still broken; the same controller puts it back on its next cycle."""
    # n1 (L40S, which svc may not use) is cool and open: n0 is not the last node open to GPU work, so it is tainted
    sim = SimCluster(make_fleet(2, 4, models=["A100-SXM4-80GB", "L40S"]), seed=1, step_s=60.0)
    sim.add_service(ServiceSpec(name="svc", replicas=4, demand=lambda t: 80.0, gpu_memory_mib=16384,
                                allowed_models=frozenset({"A100-SXM4-80GB"})))
    sim.schedule()
    sim.degrade_cooling("n0", inlet_rise_c=40.0)
    rec = Reconciler(source=SimTelemetrySource(sim), actuator=SimActuator(sim), clock=lambda: sim.time,
                     metrics=ControllerMetrics(CollectorRegistry()))
    for _ in range(10):
        sim.step()
        rec.run_once()
    assert sim.has_taint("n0")
    sim.remove_taint("n0")   # gputide.io/hot-until has passed: the Kubernetes actuator's housekeeping removes it
    sim.step()
    report = rec.run_once()
    assert [a.node for a in report.plan.actions if a.kind == "taint_node"] == ["n0"]
    assert sim.has_taint("n0")
