"""Consolidation's candidates are tested in one pass (`hotspots.may_move_now`): the answer `may_move` gives each
workload before anything is proposed, PodDisruptionBudgets with no disruption left included."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import DisruptionBudget, WorkloadClass
from balancer.noderules import Selector
from balancer.plan import hotspots

FL = make_fleet(nodes=4, gpus_per_node=4)


def budget(allowed: int, app: str) -> DisruptionBudget:
    return DisruptionBudget(f"{app}-pdb", "inference", Selector.from_json({"matchLabels": {"app": app}}), allowed)


def test_may_move_now_is_may_move_with_nothing_spent():
    kinds = [{}, {"movable": False}, {"protected": True}, {"labels": {"app": "full"}}, {"labels": {"app": "free"}},
             {"namespace": "kube-system"}, {"labels": {"app": "other"}}]
    ws = [workload(f"w-{i}", cls, milli=250, **kinds[i % len(kinds)])
          for i, cls in enumerate([WorkloadClass.INFERENCE, WorkloadClass.BATCH, WorkloadClass.TRAINING] * 7)]
    s = snapshot(FL, workloads=[(w, (i % FL.n_gpus,)) for i, w in enumerate(ws)]).replace(
        disruption_budgets=(budget(0, "full"), budget(1, "free"), budget(-1, "other")))
    policy = BalancerPolicy()
    expected = [hotspots.may_move(s, w, policy, {}, {}) for w in ws]
    assert True in expected and False in expected
    assert hotspots.may_move_now(s, ws, policy).tolist() == expected
    unseen = s.replace(disruption_budgets=None)   # a source that cannot see budgets
    assert hotspots.may_move_now(unseen, ws, policy).tolist() == [hotspots.may_move(unseen, w, policy, {}, {})
                                                                   for w in ws]
