"""A simulated shard's housekeeping keeps its own nodes: `ShardActuator` had no `housekeeping`, so in a sharded
simulation the loop's per-cycle hook never ran and a hot taint a shard set never expired (the node unschedulable for
good). Passed through as it was, a shard would expire every shard's taints, another shard's nodes included.
Now each shard removes the expired hot taints of its own nodes (`ShardedSource.nodes`), and only those."""

from __future__ import annotations

from balancer.actions import HOT_TAINT_TTL_S, Plan, TaintNode
from balancer.actuate.sim import SimActuator
from balancer.loop import Reconciler
from balancer.sim import SimCluster
from balancer.telemetry.shard import ShardActuator, ShardedSource, ShardSelector
from balancer.telemetry.sim import SimTelemetrySource
from tests.loop.loop_helpers import make_fleet

SHARDS = {"a": frozenset({"n0", "n1"}), "b": frozenset({"n2"})}
TAINTED = {"a": "n1", "b": "n2"}   # the node each shard taints on its first cycle


def tainting_once(node: str):
    """Plans a hot taint on `node` in the first cycle, nothing after (no renewal: the taint runs out)."""
    calls = []

    def plan(snap, forecasts, policy, state):
        calls.append(snap.time)
        first = len(calls) == 1
        return Plan(actions=(TaintNode(node=node, reason="hot", expected_gain=1.0),) if first else ()), state

    return plan


def sharded_sim():
    """One simulated cluster (n0, n1, n2) and a controller per shard, each with its own `ShardActuator`; each
    controller's first cycle taints one of its shard's nodes."""
    sim = SimCluster(make_fleet(nodes=3, gpus_per_node=2), seed=1, step_s=60.0)
    controllers = {}
    for name, nodes in SHARDS.items():
        source = ShardedSource(SimTelemetrySource(sim), ShardSelector(name, nodes=nodes))
        controllers[name] = Reconciler(source=source, actuator=ShardActuator(SimActuator(sim), source),
                                       planner=tainting_once(TAINTED[name]), clock=lambda: sim.time)
    for c in controllers.values():
        c.run_once()
    assert sim.has_taint("n1") and sim.has_taint("n2")
    sim.advance_to(sim.time + HOT_TAINT_TTL_S + 60.0)
    assert sim.expired_taints() == ["n1", "n2"]
    return sim, controllers


def test_a_hot_taint_a_shard_set_expires_through_its_own_housekeeping():
    sim, controllers = sharded_sim()
    controllers["a"].run_once()
    assert not sim.has_taint("n1")
    assert controllers["a"].actuator.housekeeping() == []   # nothing left of its own to release


def test_a_shards_housekeeping_leaves_another_shards_expired_taint_alone():
    sim, controllers = sharded_sim()
    controllers["b"].run_once()
    assert not sim.has_taint("n2")   # its own taint expired
    assert sim.has_taint("n1") and sim.expired_taints() == ["n1"]   # shard a's waits for shard a
    controllers["b"].run_once()
    assert sim.has_taint("n1")
    controllers["a"].run_once()
    assert not sim.has_taint("n1") and sim.expired_taints() == []


def test_a_node_relabelled_into_another_shard_is_kept_by_its_new_shard():
    """n1 moves from shard a to shard b with a's expired taint on it: from the next reading it is b's to keep."""
    sim, controllers = sharded_sim()
    a, b = (controllers[n].source for n in ("a", "b"))
    a.selector = ShardSelector("a", nodes=frozenset({"n0"}))
    b.selector = ShardSelector("b", nodes=frozenset({"n1", "n2"}))
    controllers["a"].run_once()
    assert sim.has_taint("n1")
    controllers["b"].run_once()
    assert not sim.has_taint("n1") and not sim.has_taint("n2")
