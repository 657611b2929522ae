"""Power caps outlive the controller that set them: a restarted controller, a replica that becomes the leader and a
dry run all read what was throttled from the fleet (the node's record of gputide's caps: on Kubernetes the
`gputide.io/power-caps` annotation, in the simulator `SimCluster.power_caps`) and give it back once it has cooled,
so no GPU stays capped with nobody owning it."""

from __future__ import annotations

import numpy as np
import pytest
from loop_helpers import make_fleet
from prometheus_client import CollectorRegistry

from balancer.actuate.dryrun import DryRunActuator
from balancer.actuate.sim import SimActuator
from balancer.config import BalancerPolicy
from balancer.loop import InMemoryLeaderElector, InMemoryLease, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import SetPowerLimit, TaintNode
from balancer.sim import ServiceSpec, SimCluster
from balancer.telemetry.sim import SimTelemetrySource

COOL_READINGS = BalancerPolicy().hotspots.cool_readings


def controller(sim: SimCluster, actuator=None, elector=None) -> Reconciler:
    return Reconciler(source=SimTelemetrySource(sim), actuator=actuator or SimActuator(sim), clock=lambda: sim.time,
                      metrics=ControllerMetrics(CollectorRegistry()), elector=elector)


def throttled_then_cooled(elector=None) -> tuple[SimCluster, dict[int, float]]:
    """One node of 4 busy GPUs whose cooling fails: with nowhere to move the work, a controller throttles them;
    then it is gone (killed, or it lost its Lease) and the cooling is repaired."""
    sim = SimCluster(make_fleet(1, 4), seed=1, step_s=60.0)
    sim.add_service(ServiceSpec(name="svc", replicas=4, demand=lambda t: 80.0, gpu_memory_mib=16384))
    sim.schedule()
    sim.degrade_cooling("n0", inlet_rise_c=22.0)
    first = controller(sim, elector=elector)
    for _ in range(10):
        sim.step()
        first.run_once()
    capped = {int(g): float(sim.power_limit_w[g]) for g in np.flatnonzero(sim.power_limit_w < sim.tdp_w - 1)}
    assert capped and sim.power_caps == pytest.approx(capped)   # what the first controller did, and recorded
    sim.restore_cooling("n0")
    return sim, capped


def run(sim: SimCluster, rec: Reconciler, cycles: int) -> list:
    applied = []
    for _ in range(cycles):
        sim.step()
        report = rec.run_once()
        applied += [r.action for r in report.results]
    return applied


def gave_back(actions) -> list[int]:
    return sorted(a.gpu for a in actions if isinstance(a, SetPowerLimit) and a.give_back)


def test_a_restarted_controller_gives_back_what_its_predecessor_throttled_once_the_gpus_cool():
    sim, capped = throttled_then_cooled()
    restarted = controller(sim)   # a new process: its planner state starts empty
    early = run(sim, restarted, COOL_READINGS - 1)
    assert not gave_back(early) and (sim.power_limit_w < sim.tdp_w - 1).any()   # the cool readings count first
    assert gave_back(run(sim, restarted, 1)) == sorted(capped)
    assert (sim.power_limit_w == sim.tdp_w).all() and not sim.power_caps


def test_a_replica_that_becomes_the_leader_gives_back_what_the_old_leader_throttled():
    lease = InMemoryLease(duration_s=90.0)
    sim, capped = throttled_then_cooled(InMemoryLeaderElector(lease, "a"))   # "a" dies holding the Lease
    b = controller(sim, elector=InMemoryLeaderElector(lease, "b"))
    actions = run(sim, b, COOL_READINGS + 2)
    assert lease.holder == "b" and gave_back(actions) == sorted(capped)
    assert (sim.power_limit_w == sim.tdp_w).all()


def test_a_dry_run_after_a_restart_says_it_would_give_them_back_and_changes_nothing():
    sim, capped = throttled_then_cooled()
    dry = DryRunActuator()
    run(sim, controller(sim, actuator=dry), COOL_READINGS + 1)
    assert sorted(set(gave_back(dry.actions))) == sorted(capped)   # (every cycle: a dry run applies nothing)
    assert sim.power_caps == pytest.approx(capped) and (sim.power_limit_w < sim.tdp_w - 1).sum() == len(capped)


def test_a_restarted_controller_keeps_the_taint_of_a_node_still_hot_until_it_has_read_enough_to_tell():
    """A restarted controller's streaks start from nothing: before `hotReadings` readings no GPU can be an active
    hotspot, so 'no hot node' only means 'not counted yet'. It used to remove its predecessor's taint on its first
    cycle and put it back on the next, opening the hottest node to new pods in between."""
    # n1 (L40S, which svc may not use) is cool and open: n0 is not the last node open to GPU work, so it is tainted
    sim = SimCluster(make_fleet(2, 4, models=["A100-SXM4-80GB", "L40S"]), seed=1, step_s=60.0)
    sim.add_service(ServiceSpec(name="svc", replicas=4, demand=lambda t: 80.0, gpu_memory_mib=16384,
                                allowed_models=frozenset({"A100-SXM4-80GB"})))
    sim.schedule()
    sim.degrade_cooling("n0", inlet_rise_c=40.0)
    run(sim, controller(sim), 10)
    assert sim.has_taint("n0")                                    # the first controller closed the hot node
    actions = run(sim, controller(sim), BalancerPolicy().hotspots.hot_readings + 2)
    assert not [a for a in actions if isinstance(a, TaintNode) and a.remove]
    assert sim.has_taint("n0")
