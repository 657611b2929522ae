"""One owner disrupted by two kinds of action: a reclaim shrink counts as a disruption of its job within one review
(never refused itself, it refuses the other, wherever it comes in the plan), and across cycles an owner a migration
of its pod just disrupted is in cooldown for a resize of it, and the reverse (reclaims exempt)."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry
from test_safety_disruption_and_unreadable_ledger import NOW, RECLAIM, SHRINK, SNAP, _Act, mig

from balancer import safety
from balancer.actions import Plan
from balancer.actuate.base import Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import ScaleInference, ScaleTraining
from balancer.safety import SafetyGuard, SafetyLedger

GUARD = SafetyGuard(SafetyPolicy())
DOWN = ScaleInference(service="svc", replicas=2, previous_replicas=3, reason="loan", expected_gain=1.0)
UP = ScaleInference(service="svc", replicas=4, previous_replicas=3, reason="reclaim", expected_gain=1.0)


# -- one review: a reclaim counts as a disruption of its job ------------------------------------------------------
@pytest.mark.parametrize("order", ["reclaim-first", "migration-first"])
def test_a_reclaim_and_a_migration_of_its_jobs_pod_never_go_together(order):
    actions = [RECLAIM, mig(3, 9)] if order == "reclaim-first" else [mig(3, 9), RECLAIM]
    r = GUARD.review(actions, SNAP, SafetyLedger(), NOW)
    assert r.accepted == (RECLAIM,)   # the reclaim is never refused: the migration is, before or after it
    [(a, exc)] = r.rejected
    assert a == mig(3, 9) and isinstance(exc, safety.MaxUnavailable)
    assert "reclaimed this cycle by scale_training job" in str(exc)


def test_a_refused_reclaim_holds_back_nothing_after_it():
    # the shrink takes the job (one action per target: the reclaim after it is refused as cooldown), so the
    # migration is refused by the shrink, and a migration of another owner goes
    r = GUARD.review([SHRINK, RECLAIM, mig(3, 9), mig(0, 8)], SNAP, SafetyLedger(), NOW)
    assert r.accepted == (SHRINK, mig(0, 8))
    assert [(a, type(e)) for a, e in r.rejected] == [(RECLAIM, safety.CooldownActive),
                                                     (mig(3, 9), safety.MaxUnavailable)]
    assert "already disrupted this cycle by scale_training job" in str(r.rejected[1][1])
    low = ScaleTraining(job="job", workers=2, previous_workers=3, reason="reclaim", expected_gain=0.0, reclaim=True)
    strict = SafetyGuard(SafetyPolicy(min_expected_gain=0.5))
    r = strict.review([low, mig(3, 9)], SNAP, SafetyLedger(), NOW)   # refused for its gain: it disrupts nothing
    assert r.accepted == (mig(3, 9),)


# -- across cycles: an owner disrupted by one kind is in cooldown for the others ----------------------------------
@pytest.mark.parametrize(("first", "second"), [
    (mig(0, 8), DOWN),        # a capacity loan's scale-down of a Deployment a minute after a migration of its pod
    (DOWN, mig(0, 8)),
    (mig(3, 9), SHRINK),      # a job's shrink after a migration of one of its workers
    (SHRINK, mig(3, 9)),
    (RECLAIM, mig(3, 9)),     # a reclaim disrupts its job too
], ids=["migrate-then-scale-down", "scale-down-then-migrate", "migrate-then-shrink", "shrink-then-migrate",
        "reclaim-then-migrate"])
def test_an_owner_disrupted_by_one_kind_is_in_cooldown_for_the_others(first, second):
    ledger = GUARD.record(SafetyLedger(), [first], SNAP, NOW)
    r = GUARD.review([second], SNAP, ledger, NOW + 60)
    [(_, exc)] = r.rejected
    assert isinstance(exc, safety.CooldownActive) and f"by a {first.kind} 60 s ago" in str(exc)
    assert GUARD.review([second], SNAP, ledger, NOW + GUARD.policy.cooldown_s).accepted == (second,)


def test_reclaims_scale_ups_and_the_same_kind_are_not_held_by_it():
    after_mig = GUARD.record(SafetyLedger(), [mig(3, 9), mig(0, 8)], SNAP, NOW)
    assert GUARD.review([RECLAIM, UP], SNAP, after_mig, NOW + 60).accepted == (RECLAIM, UP)   # never refused
    assert GUARD.review([mig(1, 10)], SNAP, after_mig, NOW + 60).accepted == (mig(1, 10),)   # another pod: its own
    after_up = GUARD.record(SafetyLedger(), [UP], SNAP, NOW)   # a scale-up disrupts nothing
    assert GUARD.review([mig(0, 8)], SNAP, after_up, NOW + 60).accepted == (mig(0, 8),)


def test_the_owners_cooldown_goes_to_a_successor():
    ledger = GUARD.record(SafetyLedger(), [mig(0, 8)], SNAP, NOW)
    inherited = SafetyLedger.from_json(ledger.to_json())
    assert isinstance(GUARD.review([DOWN], SNAP, inherited, NOW + 60).rejected[0][1], safety.CooldownActive)
    # forgotten once its cooldown has passed, as every other cooldown is
    assert not GUARD.record(ledger, [], SNAP, NOW + GUARD.policy.cooldown_s).last_action


# -- the budget left, as the gauge shows it --------------------------------------------------------------------
def test_the_budget_left_is_never_below_zero_once_a_reclaim_spent_past_it():
    """A reclaim spends the eviction budget without being refused by it: 3 workers stopped on a budget of 2 left
    gputide_eviction_budget_remaining at -1, which GputideEvictionBudgetExhausted (`== 0`) never saw as exhausted."""
    stop = ScaleTraining(job="job", workers=0, previous_workers=3, reason="reclaim", expected_gain=1.0, reclaim=True)
    policy = BalancerPolicy(safety=SafetyPolicy(eviction_budget=2))
    metrics = ControllerMetrics(CollectorRegistry())
    rec = Reconciler(source=_Src(), actuator=_Act(), policy=policy, metrics=metrics, clock=lambda: SNAP.time,
                     planner=lambda s, f, p, st: (Plan(actions=(stop,)), st))
    assert [r.outcome for r in rec.run_once().results] == [Outcome.APPLIED]
    assert len(rec.ledger.evictions) == 3
    assert metrics.registry.get_sample_value("gputide_eviction_budget_remaining") == 0
    assert rec.guard.remaining_evictions(rec.ledger, SNAP.time) == 0


class _Src:
    def snapshot(self):
        return SNAP
