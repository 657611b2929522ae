"""A simulated shard's recovery keeps its own nodes: `ShardActuator.recover` passed the loop's first-cycle hook
through to `SimActuator.recover`, which released the expired hot taints of every node of the simulated cluster and
finished every journalled migration, another shard's included. `SimActuator.housekeeping` and `recover` now take
the `nodes` to keep (None: all of them, as before), and `ShardActuator` gives them its shard's (`own_nodes`), before
its first reading too (the first cycle's `recover` runs before it)."""

from __future__ import annotations

from types import MappingProxyType

from balancer.actions import HOT_TAINT_TTL_S, Plan
from balancer.actuate.sim import SimActuator
from balancer.inventory import NodeMeta
from balancer.loop import Reconciler
from balancer.sim import ServiceSpec, SimCluster
from balancer.telemetry.shard import ShardActuator, ShardedSource, ShardSelector, parse_selector
from balancer.telemetry.sim import SimTelemetrySource
from tests.loop.loop_helpers import make_fleet
from tests.multisite.test_multisite_shard_housekeeping import SHARDS, sharded_sim


def idle(snap, forecasts, policy, state):
    return Plan(actions=()), state


def fresh(sim: SimCluster, shard: str, journal: dict | None = None) -> ShardActuator:
    """Shard `shard`'s actuator in a newly started process: its source has read nothing yet."""
    source = ShardedSource(SimTelemetrySource(sim), ShardSelector(shard, nodes=SHARDS[shard]))
    return ShardActuator(SimActuator(sim, journal=journal), source)


def test_a_restarted_shards_first_cycle_recover_leaves_another_shards_expired_taint_alone():
    sim, _ = sharded_sim()   # n1 (shard a) and n2 (shard b) carry an expired hot taint
    b = fresh(sim, "b")
    assert b.recover() == ["n2: hot taint expired"]
    assert sim.has_taint("n1") and sim.expired_taints() == ["n1"]   # shard a's waits for shard a
    assert fresh(sim, "a").recover() == ["n1: hot taint expired"]
    assert sim.expired_taints() == [] and not sim.has_taint("n1")


def test_a_restarted_shard_controller_keeps_its_own_nodes_on_its_first_cycle():
    sim, _ = sharded_sim()
    b = fresh(sim, "b")
    Reconciler(source=b.source, actuator=b, planner=idle, clock=lambda: sim.time).run_once()
    assert not sim.has_taint("n2") and sim.has_taint("n1")


def test_a_shard_taking_office_again_recovers_its_own_nodes_only():
    """A leader that lost and regained its Lease runs `recover` again, with the nodes of its earlier readings."""
    sim, controllers = sharded_sim()
    b = controllers["b"].actuator
    assert b.source.nodes == {"n2"}
    assert b.recover() == ["n2: hot taint expired"]
    assert sim.has_taint("n1")
    assert controllers["a"].actuator.recover() == ["n1: hot taint expired"]


def test_before_its_first_reading_a_shard_selected_by_label_finds_its_nodes_by_the_listed_labels():
    """A label the simulated fleet's nodes lack but the inner source's node list (`node_overrides`) has."""
    sim, _ = sharded_sim()

    class Labelled(SimTelemetrySource):
        def node_overrides(self):
            return {n: NodeMeta(labels=MappingProxyType({"gputide.io/shard": s}))
                    for s, nodes in SHARDS.items() for n in nodes}

    source = ShardedSource(Labelled(sim), parse_selector("b", "gputide.io/shard=b"))
    assert ShardActuator(SimActuator(sim), source).recover() == ["n2: hot taint expired"]
    assert sim.has_taint("n1")


def test_a_shards_recover_leaves_another_shards_journalled_migration_to_it():
    """Two shards sharing the journal (where Kubernetes keeps a reservation: the target node): shard a's migration,
    interrupted between reserving and moving, is finished by shard a, never by shard b."""
    sim = SimCluster(make_fleet(nodes=3, gpus_per_node=2), seed=1, step_s=60.0)
    sim.add_service(ServiceSpec(name="svc", replicas=1, demand=lambda t: 10.0, gpu_memory_mib=16384))
    (name,) = sim.placements
    source = sim.placements[name]
    target = [g.index for g in sim.fleet.gpus if g.node == "n1" and g.index not in source][:1]
    assert {sim.fleet.gpus[g].node for g in source} <= SHARDS["a"]
    journal = {name: {"source": list(source), "target": target}}
    assert fresh(sim, "b", journal).recover() == []
    assert journal and sim.placements[name] == source
    assert fresh(sim, "a", journal).recover() == [f"{name}: finished the interrupted migration to {target}"]
    assert journal == {} and sim.placements[name] == tuple(target)


def test_the_simulator_actuators_hooks_keep_the_nodes_given_and_every_node_without():
    sim, _ = sharded_sim()
    actuator = SimActuator(sim)
    assert actuator.housekeeping(nodes=iter(["n0", "n2"])) == ["n2: hot taint expired"]
    assert actuator.recover(nodes=()) == [] and sim.has_taint("n1")
    assert actuator.recover() == ["n1: hot taint expired"]
    sim.add_taint("n0", until=sim.time)
    sim.advance_to(sim.time + HOT_TAINT_TTL_S)
    assert actuator.housekeeping() == ["n0: hot taint expired"]
