"""A migrated pod's replacement that has not started yet: `maxUnavailablePerWorkload` counted a migration only for
`migrationSettleS` (60 s) and nothing looked at the replacement, so 90 s later a second replica of the same owner
went down while the first was still Pending; and the per-pod cooldown never saw the replacement (a Deployment's pod
has a new name), so a one-replica service was moved twice inside one `cooldownS`."""

from __future__ import annotations

import dataclasses
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


def test_a_replacement_waits_out_the_cooldown_of_the_first_move_not_only_the_latest():
    # svc-0 moved at -200 s, its replacement started at -195 s; svc-1 moved at -100 s: the replacement started before
    # the latest move, yet after svc-0's, within the cooldown: still held
    guard = SafetyGuard(SafetyPolicy(max_unavailable_per_workload=5))   # cooldownS 600
    ledger = moved_svc_0(guard, NOW - 200)
    ledger = guard.record(ledger, [move("svc-1", 1, 10)], snapshot(FL, workloads=[(svc(1), (1,))]), NOW - 100)
    snap = snapshot(FL, workloads=[(svc("new", NOW - 195), (9,)), (svc("new1", NOW - 95), (10,))])
    assert reasons(guard.review([move("svc-new", 9, 2)], snap, ledger, NOW)) == [("inference/svc-new", "cooldown")]
    # once the first move's cooldown is over, only svc-1's holds: a pod started before it moves
    assert guard.review([move("svc-new", 9, 2)], snap, ledger, NOW - 200 + 600).accepted == (move("svc-new", 9, 2),)


def test_a_settling_migration_and_an_unrelated_pending_replica_are_two_down():
    """svc-0 moved 30 s ago, its replacement already placed (loading); svc-3 Pending for reasons of its own: two
    replicas down. Counted as the larger of the two (one), svc-1 was accepted and three were down (audit s35a17)."""
    guard = SafetyGuard(SafetyPolicy(max_unavailable_per_workload=2, max_concurrent_migrations_per_node=9))
    ledger = moved_svc_0(guard, NOW - 30)
    snap = snapshot(FL, workloads=[(svc(1), (1,)), (svc(2), (2,)), (svc("new", NOW - 20), (9,)), (svc(3), ())])
    assert reasons(guard.review([move("svc-1", 1, 10)], snap, ledger, NOW)) == [("inference/svc-1",
                                                                                  "max_unavailable")]
    # the same PDB given as data counts the same way
    guard = SafetyGuard(SafetyPolicy(max_unavailable_per_workload=5, max_concurrent_migrations_per_node=9),
                        pdbs=[PodDisruptionBudget(owner="svc", max_unavailable=2)])
    assert reasons(guard.review([move("svc-1", 1, 10)], snap, ledger, NOW)) == [("inference/svc-1", "pdb")]
    # svc-3 running too: only the settling move is down, and one more fits
    snap = snapshot(FL, workloads=[(svc(1), (1,)), (svc(2), (2,)), (svc("new", NOW - 20), (9,)), (svc(3), (3,))])
    assert guard.review([move("svc-1", 1, 10)], snap, ledger, NOW).accepted == (move("svc-1", 1, 10),)


def test_replicas_a_forgotten_node_may_hold_are_not_short():
    # the Kubernetes source: 3 replicas asked, 2 placed, the third on a node whose exporter went dark (in neither the
    # workloads nor the placements): not Pending, so the service still gets its migrations
    guard = SafetyGuard(SafetyPolicy())
    status = ServiceStatus(name="svc", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=3,
                           replicas_from_spec=True)
    wl = [(svc(1), (1,)), (svc(2), (2,))]
    dark = dataclasses.replace(snapshot(FL, workloads=wl, services={"svc": status}), forgotten_nodes={"gone": 0})
    assert guard.review([move("svc-1", 1, 10)], dark, SafetyLedger(), NOW).accepted == (move("svc-1", 1, 10),)
    # no node forgotten: the third replica is Pending, and the service is already one down
    lit = snapshot(FL, workloads=wl, services={"svc": status})
    assert reasons(guard.review([move("svc-1", 1, 10)], lit, SafetyLedger(), NOW)) == [("inference/svc-1",
                                                                                          "max_unavailable")]


def test_a_forgotten_node_does_not_excuse_the_missing_replica_of_a_service_just_migrated():
    """A forgotten node excused its GPUs' worth of missing replicas for every service: svc, 2 replicas asked, one
    running, the other the replacement of a migration 90 s ago still Pending (past the settle window), and an
    unrelated 8-GPU node forgotten: the move of svc's last running replica was accepted (audit s35a17)."""
    guard = SafetyGuard(SafetyPolicy())
    ledger = moved_svc_0(guard, NOW - 90)
    status = ServiceStatus(name="svc", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=2,
                           replicas_from_spec=True)
    snap = dataclasses.replace(snapshot(FL, workloads=[(svc(1), (1,))], services={"svc": status}),
                               forgotten_nodes={"gone": 8})
    assert reasons(guard.review([move("svc-1", 1, 10)], snap, ledger, NOW)) == [("inference/svc-1",
                                                                                  "max_unavailable")]
    # its migration's cooldown over, the dark node excuses the missing replica again
    assert guard.review([move("svc-1", 1, 10)], snap, ledger, NOW - 90 + 601).accepted == (move("svc-1", 1, 10),)
