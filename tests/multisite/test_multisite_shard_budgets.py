"""A shard's snapshot keeps the cluster's PodDisruptionBudgets: a sharded controller's safety guard refuses the
migrations a budget does not allow now, as the unsharded one does."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from balancer import fleet as fleet_mod
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.model import DisruptionBudget, Migrate
from balancer.noderules import Selector
from balancer.safety import PdbViolation, SafetyGuard, SafetyLedger
from balancer.sim import SimCluster, default_mix
from balancer.telemetry.shard import ShardSelector, restrict

SXM = frozenset({"H100-SXM", "A100-SXM4-80GB"})


def test_a_shard_keeps_the_disruption_budgets_and_its_guard_refuses_what_they_forbid():
    sim = SimCluster(fleet_mod.demo_fleet(), seed=5, step_s=60.0)
    default_mix(sim, inference_share=0.2, training_share=0.2)
    sim.step()
    full = sim.snapshot()
    part, _ = restrict(full, ShardSelector("sxm", models=SXM))
    w = next(w for w in part.workloads if w.movable and len(part.placements[w.name]) == 1)
    labels = {"gputide.test/pdb": "held"}
    pdb = DisruptionBudget("pdb", w.namespace, Selector.from_json({"matchLabels": labels}), 0)
    full = full.replace(disruption_budgets=(pdb,), workloads=tuple(
        replace(x, labels=MappingProxyType({**x.labels, **labels})) if x.name == w.name else x
        for x in full.workloads))
    part, _ = restrict(full, ShardSelector("sxm", models=SXM))
    assert part.disruption_budgets == (pdb,)
    src = part.placements[w.name][0]
    dst = next(g.index for g in part.gpus if g.node != part.gpus[src].node
               and part.gpu_milli_used[g.index] == 0)
    move = Migrate(workload=w.name, source_gpus=(src,), target_gpus=(dst,), target_node=part.gpus[dst].node,
                   reason="x", expected_gain=1.0)
    review = SafetyGuard(BalancerPolicy(safety=SafetyPolicy()).safety).review([move], part, SafetyLedger(),
                                                                                now=part.time + 10_000)
    assert not review.accepted
    assert isinstance(review.rejected[0][1], PdbViolation)
