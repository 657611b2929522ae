"""`maxConcurrentMigrationsPerNode` counted a node's migrations only within `migrationSettleS` (60 s), so a
migration whose replacement was still Pending on its target node 90 s later no longer counted there: a second one
could land on that node while the first had not (two image pulls and warm-ups at once, against a limit of 1). Past
the settle window, a migration of an owner with replicas not running still counts on its target node, as many of
them as the owner is short (the latest first), for no longer than `cooldownS`."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import SafetyPolicy
from balancer.model import Migrate, ServiceStatus
from balancer.safety import SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)   # n0: GPUs 0-3, n1: 4-7, n2: 8-11
NOW = 10_000.0
GUARD = SafetyGuard(SafetyPolicy(max_concurrent_migrations_per_node=1))   # migrationSettleS 60, cooldownS 600


def pod(name: str, owner: str):
    return workload(name, owner=owner, started_at=NOW - 3600.0)


def move(name: str, src: int, dst: int) -> Migrate:
    return Migrate(workload=f"inference/{name}", source_gpus=(src,), target_gpus=(dst,),
                   target_node=FL.gpus[dst].node, reason="hot", expected_gain=1.0)


def moved(ledger: SafetyLedger, name: str, src: int, dst: int, at: float) -> SafetyLedger:
    """The ledger after pod `name` of svc-a moved from GPU `src` to GPU `dst` at `at`, as the loop records it."""
    return GUARD.record(ledger, [move(name, src, dst)], snapshot(FL, workloads=[(pod(name, "svc-a"), (src,))]), at)


def fleet(replacement: tuple[int, ...], services=None):
    """svc-a with a-1 running and its moved pod's replacement at `replacement` (() Pending; None: not listed), and
    pods of svc-b and svc-c ready to move."""
    pods = [(pod("a-1", "svc-a"), (2,)), (pod("b-0", "svc-b"), (4,)), (pod("c-0", "svc-c"), (1,))]
    if replacement is not None:
        pods.append((pod("a-new", "svc-a"), replacement))
    return snapshot(FL, workloads=pods, services=services)


def reasons(review) -> list[tuple[str, str]]:
    return [(a.target, exc.reason) for a, exc in review.rejected]


def test_a_replacement_still_pending_past_the_settle_window_holds_its_target_node():
    ledger = moved(SafetyLedger(), "a-0", 0, 9, NOW - 90)   # n0 -> n2, 90 s ago
    r = GUARD.review([move("b-0", 4, 10)], fleet(()), ledger, NOW)
    assert reasons(r) == [("inference/b-0", "max_concurrent_migrations")]
    assert "node n2 already has 1 in flight" in str(r.rejected[0][1])
    assert "replica not running yet" in str(r.rejected[0][1])
    # once the replacement runs on n2, it has landed: the next one may go there
    assert GUARD.review([move("b-0", 4, 10)], fleet((9,)), ledger, NOW).accepted == (move("b-0", 4, 10),)


def test_the_kubernetes_source_shows_it_as_spec_replicas_beyond_those_placed():
    status = ServiceStatus(name="svc-a", demand_rps=10.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=2,
                           replicas_from_spec=True)
    ledger = moved(SafetyLedger(), "a-0", 0, 9, NOW - 90)
    r = GUARD.review([move("b-0", 4, 10)], fleet(None, {"svc-a": status}), ledger, NOW)
    assert reasons(r) == [("inference/b-0", "max_concurrent_migrations")]


def test_its_source_node_is_free_the_pod_stopped_there():
    ledger = moved(SafetyLedger(), "a-0", 0, 9, NOW - 90)   # n0 -> n2
    r = GUARD.review([move("b-0", 4, 10), move("c-0", 1, 5)], fleet(()), ledger, NOW)
    assert reasons(r) == [("inference/b-0", "max_concurrent_migrations")]   # n1 -> n2: n2 is taken
    assert r.accepted == (move("c-0", 1, 5),)   # n0 -> n1: n0 is not


def test_it_holds_its_target_node_for_cooldown_s_at_most():
    for age, held in ((590.0, True), (610.0, False)):   # cooldownS 600: the ledger lets it go, Pending or not
        ledger = moved(SafetyLedger(), "a-0", 0, 9, NOW - age)
        r = GUARD.review([move("b-0", 4, 10)], fleet(()), ledger, NOW)
        assert reasons(r) == ([("inference/b-0", "max_concurrent_migrations")] if held else []), age


def test_an_owner_short_one_replica_holds_the_target_of_its_latest_migration_only():
    ledger = moved(moved(SafetyLedger(), "a-0", 0, 5, NOW - 300), "a-2", 3, 9, NOW - 90)   # n0 -> n1, n0 -> n2
    snap = fleet(())   # one replica of svc-a not running: the later move's, more likely
    r = GUARD.review([move("b-0", 4, 10), move("c-0", 1, 6)], snap, ledger, NOW)
    assert reasons(r) == [("inference/b-0", "max_concurrent_migrations")]
    assert r.accepted == (move("c-0", 1, 6),)


def test_the_shortfall_is_blamed_on_the_latest_move_even_one_still_settling():
    """svc-a's a-0 moved n0 -> n1 300 s ago and its replacement runs on n1; a-2 moved within n2 20 s ago and its
    replacement is Pending: svc-a is short 1, a-2's (the latest), which counts on n2 already. n1's move has landed:
    c-0 may go there. Before, the shortfall was blamed on the latest of the moves past the settle window, a-0's."""
    ledger = moved(moved(SafetyLedger(), "a-0", 0, 5, NOW - 300), "a-2", 8, 9, NOW - 20)   # n0 -> n1, n2 -> n2
    pods = [(pod("a-1", "svc-a"), (2,)), (pod("a-0new", "svc-a"), (5,)), (pod("a-2new", "svc-a"), ()),
            (pod("b-0", "svc-b"), (4,)), (pod("c-0", "svc-c"), (1,))]
    snap = snapshot(FL, workloads=pods)
    assert GUARD.review([move("c-0", 1, 6)], snap, ledger, NOW).accepted == (move("c-0", 1, 6),)   # n0 -> n1
    r = GUARD.review([move("c-0", 1, 10)], snap, ledger, NOW)   # n0 -> n2: a-2 settles there, counted once
    assert reasons(r) == [("inference/c-0", "max_concurrent_migrations")]
    assert "node n2 already has 1 in flight (limit 1)" in str(r.rejected[0][1])
