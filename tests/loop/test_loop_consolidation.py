"""Consolidation in the reconcile loop (balancer/plan/consolidation.py): with `defrag.enabled`, a GPU model whose
fragmentation crosses the threshold gets bounded migrations that empty a shared GPU, through the planner's
simulation, and never in a cycle with a hotspot, never for training, never where the pod's rules refuse the target."""

from __future__ import annotations

from dataclasses import replace

import pytest
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer.actuate.sim import SimActuator
from balancer.config import BalancerPolicy
from balancer.fleet_usage import fleet_usage
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Migrate, WorkloadClass
from balancer.noderules import NodeRules
from balancer.plan.planner import plan
from balancer.sim import ServiceSpec, SimCluster
from balancer.telemetry.sim import SimTelemetrySource

ON = BalancerPolicy().with_section("defrag", enabled=True)


def halves(n: int = 4, cls: WorkloadClass = WorkloadClass.INFERENCE, **kw):
    """`n` half-GPU pods, each alone on a GPU (GPUs 0, 1 of node n0, then 4, 5 of n1), every other GPU busy with a
    whole-GPU pod: with 4, the two idle GPUs are all in halves, unusable by the whole-GPU half of the mix (ratio 0.5,
    1 GPU). A move goes to another node (on Kubernetes the kubelet, not the scheduler, picks a node's GPU)."""
    half = [0, 1, 4, 5][:n]
    ws = [(workload(f"half-{i}", cls, owner=f"half{i}", milli=500, mem=8192, **kw), (g,)) for i, g in enumerate(half)]
    ws += [(workload(f"whole-{g}", WorkloadClass.INFERENCE, owner=f"whole{g}"), (g,))
           for g in range(8) if g not in half]
    return ws


def migrations(snap, policy=ON):
    p, _ = plan(snap, None, policy)
    return [a for a in p.actions if isinstance(a, Migrate)]


def test_two_half_used_gpus_are_consolidated_into_one_and_a_whole_gpu_freed():
    fl = make_fleet(nodes=2)
    snap = snapshot(fl, workloads=halves())
    before = fleet_usage(snap).fragmentation["A100-SXM4-80GB"]
    assert before["fragmentation_ratio"] >= 0.3, before     # the scenario is fragmented
    moves = migrations(snap)
    assert len(moves) == 2, moves
    sources, targets = {m.source_gpus[0] for m in moves}, {m.target_gpus[0] for m in moves}
    assert len(sources) == 2 and len(targets) == 2 and sources | targets == {0, 1, 4, 5}, "two halves onto the others"
    assert all(m.target_node != snap.gpus[m.source_gpus[0]].node for m in moves), "to the other node"
    assert all(m.expected_gain == pytest.approx(1.0) and m.reason.startswith("consolidate") for m in moves)
    assert migrations(snap, BalancerPolicy()) == [], "off by default"


def test_the_moves_lower_the_fragmentation_they_were_planned_for():
    fl = make_fleet(nodes=2)
    snap = snapshot(fl, workloads=halves())
    moves = migrations(snap)
    placements = dict(snap.placements)
    for m in moves:
        placements[m.workload] = m.target_gpus
    after = fleet_usage(snap.replace(placements=placements)).fragmentation["A100-SXM4-80GB"]
    before = fleet_usage(snap).fragmentation["A100-SXM4-80GB"]
    assert after["unallocatable_gpus"] < before["unallocatable_gpus"]


def test_below_the_threshold_nothing_moves():
    fl = make_fleet(nodes=2)
    snap = snapshot(fl, workloads=halves())
    assert migrations(snap, ON.with_section("defrag", fragmentation_threshold=1.0)) == []
    assert migrations(snap, ON.with_section("defrag", min_unallocatable_gpus=50.0)) == []


def test_training_is_never_consolidated():
    fl = make_fleet(nodes=2)
    snap = snapshot(fl, workloads=halves(4, WorkloadClass.TRAINING, elastic_min=1, elastic_max=1))
    assert migrations(snap) == []


def test_unmovable_or_protected_pods_stay():
    fl = make_fleet(nodes=2)
    assert migrations(snapshot(fl, workloads=halves(4, movable=False))) == []
    assert migrations(snapshot(fl, workloads=halves(4, protected=True))) == []


def test_no_consolidation_in_a_cycle_with_a_hotspot():
    fl = make_fleet(nodes=3)
    busy = [(workload(f"far-{g}", WorkloadClass.INFERENCE, owner=f"far{g}"), (g,)) for g in range(8, 12)]
    calm = snapshot(fl, workloads=halves() + busy)
    policy = ON.with_section("hotspots", hot_readings=1)
    assert len(migrations(calm, policy)) == 2, "calm: the halves are consolidated"
    hot = snapshot(fl, workloads=halves() + busy, temps={10: 95.0})   # a GPU on the third node near slowdown
    p, _ = plan(hot, None, policy)
    assert p.actions, "the hotspot is acted on"
    assert not any(a.reason.startswith("consolidate") for a in p.actions if isinstance(a, Migrate)), p.actions


def test_a_target_the_pods_node_rules_refuse_is_not_used():
    fl = make_fleet(nodes=2)
    # a node selector no node matches (the pods run where they are, placed before the label went): no target
    rules = NodeRules.from_pod_spec({"nodeSelector": {"pool": "elsewhere"}})
    assert migrations(snapshot(fl, workloads=halves(4, node_rules=rules))) == []
    both = NodeRules.from_pod_spec({"nodeSelector": {"pool": "a"}})
    nodes = [replace(n, labels={"pool": "a"}) for n in fl.nodes]
    assert len(migrations(snapshot(fl, workloads=halves(4, node_rules=both), nodes=nodes))) == 2, "labels match"


def test_the_cycle_budget_bounds_the_moves():
    fl = make_fleet(nodes=2)
    snap = snapshot(fl, workloads=halves())   # four half GPUs: two consolidations possible
    assert len(migrations(snap)) == 2
    assert len(migrations(snap, ON.with_section("defrag", max_moves_per_cycle=1))) == 1


def test_gpu_memory_that_does_not_fit_blocks_the_move():
    fl = make_fleet(nodes=2)
    big = [(replace(w, gpu_memory_mib=50000), g) for w, g in halves()]
    assert migrations(snapshot(fl, workloads=big)) == []


def test_the_reconcile_loop_consolidates_a_simulated_fleet_through_the_guard_until_under_the_threshold():
    sim = SimCluster(make_fleet(nodes=2), seed=1, step_s=60.0)
    sim.add_service(ServiceSpec(name="half", replicas=4, gpu_milli=500, demand=lambda t: 10.0, gpu_memory_mib=8192))
    sim.add_service(ServiceSpec(name="whole", replicas=4, demand=lambda t: 10.0, gpu_memory_mib=8192))
    layout = {"inference/whole-0": 2, "inference/whole-1": 3, "inference/whole-2": 6, "inference/whole-3": 7,
              "inference/half-2": 4, "inference/half-3": 5, "inference/half-1": 1, "inference/half-0": 0}
    for name in layout:   # the wholes out of the way first, then each half alone on a GPU of its own
        sim.migrate(name, [layout[name]])
    assert dict(sim.placements) == {n: (g,) for n, g in layout.items()}
    rec = Reconciler(source=SimTelemetrySource(sim), actuator=SimActuator(sim), clock=lambda: sim.time,
                     metrics=ControllerMetrics(CollectorRegistry()), policy=ON)
    before = set(sim.placements)
    for _ in range(3):
        sim.step()
        rec.run_once()
    used = {g for gpus in sim.placements.values() for g in gpus}
    # one replica of the service moves (maxUnavailablePerWorkload 1); after it, one fragmented GPU's worth of halves
    # is left, 0.5 of a GPU unusable: under minUnallocatableGpus, so it stops there
    assert len(used) == 7, f"a GPU freed: {sim.placements}"
    assert set(sim.placements) == before and not sim.pending, "every workload still has its place"
