"""Audit a9: one owner disrupted twice in one review by actions of two kinds (a migration of one of its pods and a
resize of it), and a successor that found the Lease's ledger unreadable spending a full eviction budget."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry

from balancer import safety
from balancer.actions import Plan
from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.ledger_handover import LedgerHandover
from balancer.loop import InMemoryLeaderElector, InMemoryLease, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Migrate, ScaleInference, ScaleTraining, WorkloadClass
from balancer.safety import SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
W = [(workload(f"svc-{i}", owner="svc"), (i,)) for i in range(3)]
W += [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1), (4 + i,)) for i in range(3)]
SNAP = snapshot(FL, workloads=W)
NOW = 10_000.0


def mig(i, target):
    w, g = W[i]
    return Migrate(workload=w.name, source_gpus=g, target_gpus=(target,), target_node=FL.gpus[target].node,
                   reason="hot", expected_gain=1.0)


DOWN = ScaleInference(service="svc", replicas=2, previous_replicas=3, reason="slack", expected_gain=1.0)
SHRINK = ScaleTraining(job="job", workers=2, previous_workers=3, reason="x", expected_gain=1.0)
RECLAIM = ScaleTraining(job="job", workers=2, previous_workers=3, reason="reclaim", expected_gain=1.0, reclaim=True)


def review(actions, policy=None):
    return SafetyGuard(policy or SafetyPolicy()).review(actions, SNAP, SafetyLedger(), NOW)


def test_a_resize_and_a_migration_of_one_owner_never_go_together_in_one_review():
    r = review([mig(0, 8), DOWN, mig(3, 9), SHRINK])
    assert [a.kind for a in r.accepted] == ["migrate", "migrate"]
    assert [(a.kind, type(e)) for a, e in r.rejected] == [("scale_inference", safety.MaxUnavailable),
                                                          ("scale_training", safety.MaxUnavailable)]
    assert "migrate inference/svc-0" in str(r.rejected[0][1])


def test_the_second_one_is_refused_whichever_kind_comes_first():
    r = review([DOWN, mig(0, 8), SHRINK, mig(3, 9)])
    assert [a.kind for a in r.accepted] == ["scale_inference", "scale_training"]
    assert all(isinstance(e, safety.MaxUnavailable) for _, e in r.rejected) and len(r.rejected) == 2
    assert "scale_inference svc" in str(r.rejected[0][1])


def test_a_reclaim_is_never_refused_by_it_and_two_migrations_stay_max_unavailables_to_count():
    r = review([mig(3, 9), RECLAIM, mig(0, 8)])   # a reclaim: never refused; it counts (test_safety_reclaim_...)
    assert [a.kind for a in r.accepted] == ["scale_training", "migrate"]
    assert [(a.target, type(e)) for a, e in r.rejected] == [("training/job-0", safety.MaxUnavailable)]
    two = SafetyPolicy(max_unavailable_per_workload=2)
    assert len(review([mig(0, 8), mig(1, 9)], two).accepted) == 2
    r = review([mig(0, 8), mig(1, 9), DOWN], two)
    assert [a.kind for a, _ in r.rejected] == ["scale_inference"]


# -- an unreadable inherited ledger -------------------------------------------------------------------------------
LW = [(workload(f"w{i}-0", owner=f"w{i}"), (i,)) for i in range(4)]
LSNAP = snapshot(FL, workloads=LW, time=1000.0)
POLICY = BalancerPolicy(safety=SafetyPolicy(eviction_budget=2, max_concurrent_migrations_per_node=10,
                                            max_actions_per_cycle=10))


class _Src:
    def snapshot(self):
        return LSNAP


class _Act:
    def apply(self, a, s):
        return ActionResult(a, Outcome.APPLIED, "ok")


def _planner(s, f, p, st):
    return Plan(actions=tuple(Migrate(workload=w.name, source_gpus=g, target_gpus=(8 + g[0],), target_node="n2",
                                      reason="hot", expected_gain=1.0) for w, g in LW)), st


def _replica(lease, name, clock):
    return Reconciler(source=_Src(), actuator=_Act(), policy=POLICY, planner=_planner, clock=lambda: clock[0],
                      metrics=ControllerMetrics(CollectorRegistry()), elector=InMemoryLeaderElector(lease, name))


def _evicted(report):
    return sum(1 for x in report.results if x.outcome == Outcome.APPLIED)


def test_a_successor_that_cannot_read_the_ledger_takes_the_budget_as_spent_for_a_window(caplog):
    clock, lease = [1000.0], InMemoryLease(duration_s=15)
    assert _evicted(_replica(lease, "a", clock).run_once()) == 2
    lease.state = lease.state[:-2]   # the annotation cut short
    clock[0] += 60
    b = _replica(lease, "b", clock)
    assert _evicted(b.run_once()) == 0
    assert "taken as spent" in caplog.text
    clock[0] += POLICY.safety.eviction_window_s - 1
    assert _evicted(b.run_once()) == 0
    # saved over the unreadable one: a successor of this one inherits the spent budget too
    assert SafetyLedger.from_json(lease.state).evictions == (1060.0, 1060.0)
    clock[0] += 1   # the window from b's first review has passed
    assert _evicted(b.run_once()) == 2


def test_reclaims_still_go_and_a_readable_or_missing_ledger_holds_nothing_back():
    guard = SafetyGuard(POLICY.safety)
    lease = InMemoryLease(duration_s=15)
    lease.state = '{"evictions":[1'
    elector = InMemoryLeaderElector(lease, "b")
    assert elector.try_acquire(NOW)
    h = LedgerHandover(elector)
    h.inherit(SafetyLedger())
    s = snapshot(FL, workloads=W)
    r = h.review(guard, [mig(0, 8), RECLAIM], s, SafetyLedger(), NOW)
    assert [a.kind for a in r.accepted] == ["scale_training"]
    assert isinstance(r.rejected[0][1], safety.EvictionBudgetExhausted)
    other = InMemoryLeaderElector(InMemoryLease(duration_s=15), "c")
    assert other.try_acquire(NOW)
    fresh = LedgerHandover(other)
    fresh.inherit(SafetyLedger())
    assert len(fresh.review(guard, [mig(0, 8)], s, SafetyLedger(), NOW).accepted) == 1
