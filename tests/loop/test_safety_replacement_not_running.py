"""A migrated pod's replacement that has not started yet: `maxUnavailablePerWorkload` counted a migration only for
`migrationSettleS` (60 s) and nothing looked at the replacement, so 90 s later a second replica of the same owner
went down while the first was still Pending; and the per-pod cooldown never saw the replacement (a Deployment's pod
has a new name), so a one-replica service was moved twice inside one `cooldownS`."""

from __future__ import annotations

import math

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import SafetyPolicy
from balancer.model import Migrate, ServiceStatus
from balancer.safety import PodDisruptionBudget, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
NOW = 10_000.0
LONG_AGO = NOW - 3600.0   # started well before the migration: a sibling, not the replacement


def svc(i: int | str, started_at: float = LONG_AGO):
    return workload(f"svc-{i}", owner="svc", started_at=started_at)


def moved_svc_0(guard: SafetyGuard, at: float) -> SafetyLedger:
    """The ledger after svc-0 moved from GPU 0 to GPU 9 at `at`, as the loop records it."""
    before = snapshot(FL, workloads=[(svc(0), (0,))])
    return guard.record(SafetyLedger(), [move("svc-0", 0, 9)], before, at)


def move(pod: str, src: int, dst: int) -> Migrate:
    return Migrate(workload=f"inference/{pod}", source_gpus=(src,), target_gpus=(dst,),
                   target_node=FL.gpus[dst].node, reason="hot", expected_gain=1.0)


def reasons(review) -> list[tuple[str, str]]:
    return [(a.target, exc.reason) for a, exc in review.rejected]


def test_a_replacement_still_pending_counts_as_unavailable_after_the_settle_window():
    guard = SafetyGuard(SafetyPolicy())   # maxUnavailablePerWorkload 1, migrationSettleS 60
    ledger = moved_svc_0(guard, NOW - 90)
    pending = snapshot(FL, workloads=[(svc(1), (1,)), (svc(2), (2,)), (svc("new", NOW - 30), ())])
    r = guard.review([move("svc-1", 1, 10)], pending, ledger, NOW)
    assert reasons(r) == [("inference/svc-1", "max_unavailable")]
    assert "1 not running" in str(r.rejected[0][1])
    # once the replacement runs, every replica is up again: the next one may move
    running = snapshot(FL, workloads=[(svc(1), (1,)), (svc(2), (2,)), (svc("new", NOW - 30), (9,))])
    assert guard.review([move("svc-1", 1, 10)], running, ledger, NOW).accepted == (move("svc-1", 1, 10),)


def test_the_kubernetes_source_shows_the_pending_replacement_as_replicas_asked_beyond_those_placed():
    # the Kubernetes source lists running pods only: the replacement is in the spec's replicas, not in the pods
    guard = SafetyGuard(SafetyPolicy())
    ledger = moved_svc_0(guard, NOW - 90)
    status = ServiceStatus(name="svc", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=3,
                           replicas_from_spec=True)
    snap = snapshot(FL, workloads=[(svc(1), (1,)), (svc(2), (2,))], services={"svc": status})
    assert reasons(guard.review([move("svc-1", 1, 10)], snap, ledger, NOW)) == [("inference/svc-1", "max_unavailable")]
    whole = snapshot(FL, workloads=[(svc(1), (1,)), (svc(2), (2,)), (svc("new", NOW - 30), (9,))],
                     services={"svc": status})
    assert guard.review([move("svc-1", 1, 10)], whole, ledger, NOW).accepted == (move("svc-1", 1, 10),)


def test_a_pdb_given_as_data_counts_the_replicas_not_running_against_its_max_unavailable():
    guard = SafetyGuard(SafetyPolicy(max_unavailable_per_workload=5),
                        pdbs=[PodDisruptionBudget(owner="svc", max_unavailable=1)])
    snap = snapshot(FL, workloads=[(svc(1), (1,)), (svc(2), (2,)), (svc(3), ())])
    assert reasons(guard.review([move("svc-1", 1, 10)], snap, SafetyLedger(), NOW)) == [("inference/svc-1", "pdb")]


def test_the_replacement_waits_out_the_cooldown_of_the_pod_it_replaced_its_siblings_do_not():
    guard = SafetyGuard(SafetyPolicy())   # cooldownS 600
    ledger = moved_svc_0(guard, NOW - 90)
    snap = snapshot(FL, workloads=[(svc("new", NOW - 80), (9,))])   # a one-replica service
    r = guard.review([move("svc-new", 9, 1)], snap, ledger, NOW)
    assert reasons(r) == [("inference/svc-new", "cooldown")]
    assert "may be that pod's replacement" in str(r.rejected[0][1])
    # after the cooldown it may move again
    assert guard.review([move("svc-new", 9, 1)], snap, ledger, NOW - 90 + 600).accepted == (move("svc-new", 9, 1),)
    # the cooldown is not the owner's: a sibling running since before the migration, or of unknown start (a source
    # without the Kubernetes API's pods), still moves, so a hot node's other replicas drain one per settle window
    for started in (LONG_AGO, math.nan):
        snap = snapshot(FL, workloads=[(svc("new", NOW - 80), (9,)), (svc(1, started), (1,))])
        assert guard.review([move("svc-1", 1, 10)], snap, ledger, NOW).accepted == (move("svc-1", 1, 10),)
