"""The soak's budget check counts an action's evictions as the safety guard does: it had a count of its own (the
workers a resize removes, the replicas a scale-down drops), so a grow of a job that restarts whole (every running
worker stopped) spent nothing in the soak's view, and a scale-down that dropped pending replicas spent pods the
guard never counted: the soak's "no budget exceeded" did not check the budget the guard enforces."""

from __future__ import annotations

import pytest

from balancer.app.soak_checks import BudgetCheck
from balancer.config import SafetyPolicy
from balancer.model import Migrate, ScaleInference, ScaleTraining, WorkloadClass
from balancer.safety import SafetyGuard, SafetyLedger
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FL = make_fleet(3, 4)
NOW = 10_000.0
BUDGET = 3


def fleet_snapshot(restarts: bool):
    """A 4-worker job (restarting whole on a resize or elastic) and a service with 2 of its 3 replicas placed."""
    w = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, elastic_max=8,
                   restarts_on_resize=restarts), (i,)) for i in range(4)]
    w += [(workload(f"svc-{i}", owner="svc"), (8 + i,)) for i in range(2)]
    w += [(workload("svc-2", owner="svc"), ())]   # pending
    return snapshot(FL, workloads=w)


def resize(workers: int) -> ScaleTraining:
    return ScaleTraining(job="job", workers=workers, previous_workers=4, reason="tide", expected_gain=1.0)


def scale_down(replicas: int) -> ScaleInference:
    return ScaleInference(service="svc", replicas=replicas, previous_replicas=3, reason="loan", expected_gain=1.0)


MOVE = Migrate(workload="inference/svc-0", source_gpus=(8,), target_node="n0", target_gpus=(3,), reason="hot",
               expected_gain=1.0)


@pytest.mark.parametrize(("action", "restarts", "guard_spends"), [
    (resize(6), True, 4),       # the soak counted 0: a grow removes no worker
    (resize(3), True, 4),       # the soak counted 1
    (resize(3), False, 1),
    (scale_down(1), False, 1),  # the soak counted 2: the pending replica goes first and stops nothing
    (scale_down(2), False, 0),
    (MOVE, False, 1),
], ids=["restarting-grow", "restarting-shrink", "elastic-shrink", "scale-down-past-pending", "drops-only-pending",
        "migration"])
def test_the_soak_counts_evictions_as_the_guard_does(action, restarts, guard_spends):
    snap = fleet_snapshot(restarts)
    policy = SafetyPolicy(eviction_budget=BUDGET)
    spent = len(SafetyGuard(policy).record(SafetyLedger(), [action], snap, NOW).evictions)
    assert spent == guard_spends   # the case is what it says
    check = BudgetCheck(policy)
    check.on_applied(1, NOW, action, snap)
    assert check.peak["evictions_per_window"] == spent
    assert bool(check.check.breaches) == (spent > BUDGET)


def test_a_shrink_of_a_job_with_pending_workers_spends_only_the_placed_ones_it_stops():
    # 4 workers placed, 2 pending: down to 3 deletes the 2 pending pods and stops one running worker (it spent 3, and
    # a reclaim from a job grown onto GPUs not yet free took the budget loans need)
    w = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, elastic_max=8), (i,))
         for i in range(4)]
    w += [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, elastic_max=8), ())
          for i in (4, 5)]
    snap = snapshot(FL, workloads=w)
    shrink = ScaleTraining(job="job", workers=3, previous_workers=6, reason="tide", expected_gain=1.0)
    guard = SafetyGuard(SafetyPolicy(eviction_budget=BUDGET))
    assert len(guard.record(SafetyLedger(), [shrink], snap, NOW).evictions) == 1
    only_pending = ScaleTraining(job="job", workers=4, previous_workers=6, reason="tide", expected_gain=1.0)
    assert len(guard.record(SafetyLedger(), [only_pending], snap, NOW).evictions) == 0
