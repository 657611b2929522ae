"""A simulated shard refuses an action on a node that left it, as `gputide run --shard` does: the simulator's
`ShardActuator` translated and carried out whatever it was given, so a taint or a power cap planned on a node
relabelled into another shard reached the simulated cluster (both shards acting on one node), and a migration whose
GPUs had been renumbered (a node left) raised IndexError out of `globalize` instead of coming back as a result.
Both shard actuators now share `shard.refused`."""

from __future__ import annotations

import logging
from dataclasses import replace
from types import MappingProxyType

import pytest

from balancer.actions import Migrate, Plan, SetPowerLimit, TaintNode
from balancer.actuate.sim import SimActuator
from balancer.inventory import NodeMeta
from balancer.loop import Reconciler
from balancer.sim import SimCluster
from balancer.telemetry.shard import ShardActuator, ShardedSource, parse_selector
from balancer.telemetry.sim import SimTelemetrySource
from tests.loop.loop_helpers import make_fleet

LABEL = "gputide.io/shard"


class Relabelled:
    """The simulated cluster's telemetry (n0, n1, n2, two GPUs each) with each node's shard label as `read` says;
    `now` is the Kubernetes API's node list (`node_overrides`), which may have seen a relabel the reading has not."""

    def __init__(self, sim: SimCluster) -> None:
        self.inner = SimTelemetrySource(sim)
        self.read = {"n0": "a", "n1": "a", "n2": "b"}
        self.now = dict(self.read)

    def node_overrides(self):
        return {n: NodeMeta(labels=MappingProxyType({LABEL: s})) for n, s in self.now.items()}

    def snapshot(self):
        snap = self.inner.snapshot()
        return snap.replace(nodes=tuple(replace(n, labels=MappingProxyType({LABEL: self.read[n.name]}))
                                        for n in snap.nodes))


def shard_a():
    sim = SimCluster(make_fleet(nodes=3, gpus_per_node=2), seed=1, step_s=60.0)
    inner = Relabelled(sim)
    source = ShardedSource(inner, parse_selector("a", f"{LABEL}=a"))
    return sim, inner, source, ShardActuator(SimActuator(sim), source)


UUID = {g.index: g.uuid for g in make_fleet(nodes=3, gpus_per_node=2).gpus}
ACTIONS = {   # planned by shard a on n0 (its GPUs 0, 1) and n1 (2, 3)
    "a taint": TaintNode(node="n1", reason="hot"),
    "a power limit": SetPowerLimit(gpu=2, uuid=UUID[2], node="n1", watts=300.0, previous_watts=400.0, reason="hot"),
    "a migration's target": Migrate(workload="w", source_gpus=(0,), target_gpus=(2,), target_node="n1", reason="hot"),
    "a migration's source": Migrate(workload="w", source_gpus=(2,), target_gpus=(0,), target_node="n0", reason="hot"),
}


def untouched(sim: SimCluster) -> bool:
    return not sim.has_taint("n1") and not sim.power_caps


@pytest.mark.parametrize("seen", ["by the reading before acting", "by the Kubernetes API only"])
@pytest.mark.parametrize("action", ACTIONS.values(), ids=ACTIONS.keys())
def test_a_simulated_shard_refuses_an_action_on_a_node_relabelled_into_another_shard(action, seen, caplog):
    sim, inner, source, actuator = shard_a()
    planned_on = source.snapshot()
    inner.now["n1"] = "b"
    if seen == "by the reading before acting":
        inner.read["n1"] = "b"
    with caplog.at_level(logging.WARNING, logger="balancer.telemetry.shard"):
        res = actuator.apply(action, source.snapshot() if seen.startswith("by the reading") else planned_on)
    assert (str(res.outcome), res.code, res.action) == ("failed", "refused", action)
    assert "refused by shard a" in res.detail and ("n1" in res.detail or "source GPUs [2]" in res.detail), res.detail
    assert untouched(sim)
    assert any("shard a refuses" in r.getMessage() for r in caplog.records)


def test_a_migration_onto_gpus_renumbered_since_the_plan_is_refused_not_raised():
    """n0 leaves shard a: n1's GPUs are its 0 and 1 now, and a move planned onto n1's GPU 2 names no GPU of the
    shard (globalize read past the end of its index: IndexError out of the actuator, which ends the cycle)."""
    sim, inner, source, actuator = shard_a()
    source.snapshot()
    inner.read["n0"] = inner.now["n0"] = "b"
    fresh = source.snapshot()
    move = Migrate(workload="w", source_gpus=(0,), target_gpus=(2,), target_node="n1", reason="hot")
    res = actuator.apply(move, fresh)
    assert (str(res.outcome), res.code) == ("failed", "refused")
    assert "renumbered" in res.detail


def relabelling_planner(inner: Relabelled):
    """Plans a taint on each of shard a's nodes, then n1 is relabelled into shard b before the loop acts."""

    def plan(snap, forecasts, policy, state):
        inner.read["n1"] = inner.now["n1"] = "b"
        return Plan(actions=tuple(TaintNode(node=n.name, reason="test", expected_gain=1.0) for n in snap.nodes)), state

    return plan


def test_a_simulated_shard_controller_refuses_mid_cycle_as_a_real_one_and_acts_on_its_own_nodes():
    sim, inner, source, actuator = shard_a()
    report = Reconciler(source=source, actuator=actuator, planner=relabelling_planner(inner),
                        clock=lambda: sim.time).run_once()
    got = {r.action.target: (str(r.outcome), r.code) for r in report.results}
    assert got == {"n0": ("applied", ""), "n1": ("failed", "refused")}
    assert sim.has_taint("n0") and not sim.has_taint("n1")
