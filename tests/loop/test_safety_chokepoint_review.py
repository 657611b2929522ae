"""The safety chokepoint under review: budgets that one action kind slipped past, a target acted on twice in one
cycle, the emergency-stop label and resizes, give-backs on protected GPUs, and the ledger a successor inherits."""

from __future__ import annotations

import pytest
from loop_helpers import make_fleet, snapshot, workload

from balancer import safety
from balancer.config import SafetyPolicy
from balancer.model import ScaleTraining, WorkloadClass
from balancer.safety import SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
NOW = 10_000.0


def job_snapshot(restarts: bool, *, nodes=None, protected_svc: bool = False):
    w = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, elastic_max=8,
                   restarts_on_resize=restarts), (i,)) for i in range(4)]
    w += [(workload(f"svc-{i}", owner="svc", protected=protected_svc), (8 + i,)) for i in range(3)]
    return snapshot(FL, workloads=w, nodes=nodes)


def resize(workers, previous=4, **kw):
    return ScaleTraining(job="job", workers=workers, previous_workers=previous, reason="tide", expected_gain=1.0, **kw)




@pytest.mark.parametrize(("workers", "spent_if_restarting", "spent_if_elastic"), [(6, 4, 0), (3, 4, 1), (0, 4, 4)],
                         ids=["grow", "shrink", "stop"])
def test_a_resize_that_restarts_the_whole_job_spends_every_running_worker(workers, spent_if_restarting,
                                                                         spent_if_elastic):
    """A Kueue-queued Job without elastic slices (or torchrun elastic) stops all its pods to change size: a grow of 4
    running workers stopped 4 pods and spent none of the eviction budget, a shrink by one spent 1."""
    guard = SafetyGuard(SafetyPolicy(eviction_budget=10))
    for restarts, spent in ((True, spent_if_restarting), (False, spent_if_elastic)):
        snap = job_snapshot(restarts)
        ledger = guard.record(SafetyLedger(), [resize(workers)], snap, NOW)
        assert guard.remaining_evictions(ledger, NOW) == 10 - spent, f"restarts={restarts}"
    tight = SafetyGuard(SafetyPolicy(eviction_budget=3)).review([resize(workers)], job_snapshot(True),
                                                                SafetyLedger(), NOW)
    assert isinstance(tight.rejected[0][1], safety.EvictionBudgetExhausted)


def test_a_restarting_reclaim_still_goes_through_an_empty_budget_and_spends_it():
    guard = SafetyGuard(SafetyPolicy(eviction_budget=0))
    review = guard.review([resize(2, reclaim=True)], job_snapshot(True), SafetyLedger(), NOW)
    assert review.accepted
    assert guard.remaining_evictions(guard.record(SafetyLedger(), review.accepted, job_snapshot(True), NOW),
                                     NOW) == -4
