"""A migration the guard refuses because its TARGET node has `maxConcurrentMigrationsPerNode` in flight (another
owner's replacement still Pending there) is kept off that node only (`planner.refuse(..., targets=...)`): the next
cycle the hot pod goes to another node with room. Before, the refusal kept the pod from moving at all for
`refusedRetryS`, and its hot GPU was throttled though another node had room. A refusal for the pod's own node (its
SOURCE has too many in flight) is not the target's: the pod is not moved for a while, as before. The refusal names
the owner whose replacement is still landing.

The fleet: n0, n1, n2 of four GPUs; web-0 runs hot on n0's GPU 0; n1 is the best target (the first of equals), n2 the
next best. svc-x moved a pod 90 s before the first cycle (past migrationSettleS, 60 s), its replacement still
Pending: short 1, that move holds its target node."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.model import ClusterSnapshot, DisruptionBudget, Migrate
from balancer.noderules import Selector
from balancer.plan.planner import PlannerState
from balancer.safety import PodDisruptionBudget, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
T0 = 1000.0
WEB = workload("web-0", owner="web")
PENDING = workload("x-new", owner="svc-x")   # svc-x's replacement, not placed: svc-x short 1
LIMIT = SafetyPolicy(max_concurrent_migrations_per_node=1)


class Applies:
    """Applies every action; the fleet the source reads stays as it is (web-0 stays hot)."""

    name = "applies"

    def apply(self, action, snapshot: ClusterSnapshot) -> ActionResult:
        return ActionResult(action, Outcome.APPLIED)


def fleet(clock: list[float]) -> ClusterSnapshot:
    return snapshot(FL, workloads=[(WEB, (0,)), (PENDING, ())], temps={0: 86}, time=clock[0])


class Source:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def snapshot(self) -> ClusterSnapshot:
        return fleet(self.clock)


def landing(src: str, dst: str) -> SafetyLedger:
    """svc-x's move from `src` to `dst` 90 s before the first cycle."""
    return SafetyLedger(migrations=((T0 - 90.0, src, dst, "svc-x"),))


def run(ledger: SafetyLedger, cycles: int = 3) -> tuple[Reconciler, list[str | None], list]:
    """The reconciler after `cycles` cycles 30 s apart, the target each cycle proposed for web-0 (None: none), and
    each cycle's rejections."""
    clock = [T0]
    rec = Reconciler(source=Source(clock), actuator=Applies(),
                     policy=BalancerPolicy().with_section("safety", max_concurrent_migrations_per_node=1),
                     clock=lambda: clock[0])
    rec.ledger = ledger
    targets, rejected = [], []
    for _ in range(cycles):
        report = rec.run_once()
        targets.append(next((a.target_node for a in report.plan.actions if isinstance(a, Migrate)), None))
        rejected.append(report.rejected)
        clock[0] += 30.0
    return rec, targets, rejected


def test_a_target_held_by_another_owners_landing_replacement_is_skipped_and_the_next_best_taken() -> None:
    rec, targets, rejected = run(landing("n2", "n1"))
    assert targets == [None, "n1", "n2"]   # before: [None, "n1", None], the hot GPU throttled
    assert [(a.target_node, why) for a, why in rejected[1]] == [("n1", "max_concurrent_migrations")]
    assert isinstance(rec.state, PlannerState)
    assert ("inference/web-0", "n1") in rec.state.refused_targets
    assert "inference/web-0" not in rec.state.refused_moves
    # svc-x's move landing on n0, web-0's own node: no target would do, the pod is not moved for a while
    rec, targets, _ = run(landing("n2", "n0"))
    assert targets == [None, "n1", None]
    assert "inference/web-0" in rec.state.refused_moves
    assert not rec.state.refused_targets


def test_the_refusal_names_the_owner_whose_replacement_is_landing_and_whether_it_is_the_target_alone() -> None:
    guard = SafetyGuard(LIMIT)
    snap = fleet([T0])
    to_n1 = Migrate(workload="inference/web-0", source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="hot",
                    expected_gain=1.0)
    settling = SafetyLedger(migrations=((T0 - 10.0, "n0", "n1", "svc-y"),))   # both of web-0's nodes full
    for ledger, target_only, named in ((landing("n2", "n1"), True, "svc-x"), (landing("n2", "n0"), False, "svc-x"),
                                       (settling, False, None)):
        (_, exc), = guard.review([to_n1], snap, ledger, T0).rejected
        assert exc.reason == "max_concurrent_migrations"
        assert exc.target_only is target_only, str(exc)
        if named:
            assert f"replica not running yet: {named})" in str(exc), str(exc)


FL6 = make_fleet(6, 4)
OTHERS = [workload(f"x{i}-new", owner=f"svc-x{i}") for i in range(1, 6)]   # each owner short 1


def test_every_full_node_is_kept_off_at_once_so_the_hot_gpu_is_throttled_the_next_cycle() -> None:
    """Six nodes: n1..n5 each hold another owner's replacement still landing (limit 1), web-0 hot on n0. The planner
    does not see them full: kept off its target alone, web-0 was proposed n2, n3, n4, n5 in turn, each refused, and
    its GPU throttled only in the sixth cycle. Every full node kept off at once, it is throttled the next cycle."""
    clock = [T0]

    class Six:
        def snapshot(self) -> ClusterSnapshot:
            return snapshot(FL6, workloads=[(WEB, (0,)), *((w, ()) for w in OTHERS)], temps={0: 86}, time=clock[0])

    rec = Reconciler(source=Six(), actuator=Applies(),
                     policy=BalancerPolicy().with_section("safety", max_concurrent_migrations_per_node=1),
                     clock=lambda: clock[0])
    rec.ledger = SafetyLedger(migrations=tuple((T0 - 90.0, f"n{i % 5 + 1}", f"n{i}", f"svc-x{i}") for i in range(1, 6)))
    kinds = []
    for _ in range(3):
        kinds.append(sorted({a.kind for a in rec.run_once().plan.actions} - {"taint_node"}))
        clock[0] += 30.0
    assert kinds == [[], ["migrate"], ["power_limit"]], kinds   # before: [[], ["migrate"], ["migrate"]] (to n2)
    assert {n for w, n in rec.state.refused_targets if w == "inference/web-0"} == {f"n{i}" for i in range(1, 6)}
    assert "inference/web-0" not in rec.state.refused_moves
    # the guard says which: every node at the limit in this review, the target among them
    to_n1 = Migrate(workload="inference/web-0", source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="hot",
                    expected_gain=1.0)
    six = snapshot(FL6, workloads=[(WEB, (0,)), *((w, ()) for w in OTHERS)], temps={0: 86}, time=T0)
    (_, exc), = SafetyGuard(LIMIT).review([to_n1], six, rec.ledger, T0).rejected
    assert exc.target_only and exc.full_nodes == {f"n{i}" for i in range(1, 6)}, (exc.full_nodes, str(exc))


def test_nodes_full_only_with_a_settling_migration_are_kept_off_the_refused_target_only() -> None:
    """svc-y moved n2 -> n1 20 s before the first cycle, its replacement running: n1 and n2 (its source) are full
    (limit 1) only until it settles, at T0+40. The move to n1 refused at T0+30, the pod is kept off n1 alone (n2 is no
    `full_nodes`: it frees within the settle window), and only while the guard counts n1 full: at T0+60 n1 has
    settled, and the pod goes there, its best target. Before, every node at the limit was kept off for
    refusedTargetRetryS (600 s), n2 too: the hot GPU throttled at T0+60 though n2 had room; and then the refused target
    itself was kept off for those 600 s (unmarked, taken for the actuator's refusal): the pod went to n2, the
    next-best node, though n1 had room again."""
    rec, targets, rejected = run(SafetyLedger(migrations=((T0 - 20.0, "n2", "n1", "svc-y"),)))
    assert targets == [None, "n1", "n1"], targets   # before: [None, "n1", "n2"]; earlier still [None, "n1", None]
    assert [(a.target_node, why) for a, why in rejected[1]] == [("n1", "max_concurrent_migrations")]
    assert not rejected[2]
    assert not {n for w, n in rec.state.refused_targets if w == "inference/web-0"}   # before: {"n1"}
    # the guard names only the nodes held by replacements landing past the settle window: none here, n1 below
    to_n1 = Migrate(workload="inference/web-0", source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="hot",
                    expected_gain=1.0)
    settling = SafetyLedger(migrations=((T0 - 20.0, "n2", "n1", "svc-y"),))
    for ledger, full in ((settling, frozenset()), (landing("n2", "n1"), {"n1"})):
        (_, exc), = SafetyGuard(LIMIT).review([to_n1], fleet([T0]), ledger, T0).rejected
        assert exc.target_only and exc.full_nodes == full, (exc.full_nodes, str(exc))


FL5 = make_fleet(5, 4)
WEB1 = workload("web-1", owner="web")


def test_a_pod_whose_owner_is_at_its_limit_is_not_refused_for_its_target_alone() -> None:
    """web-1 moved n3 -> n4 at T0+20 (settling: web has maxUnavailablePerWorkload, 1, disrupted, which the planner
    does not see); n1 holds svc-x's replacement still landing (limit 1 per node). web-0's move to n1 at T0+30 is
    refused for n1, but its owner would refuse it anywhere: not the target's refusal alone, the pod is not moved for a
    while and its hot GPU throttled the next cycle. Before, kept off n1 only, it was proposed n2 at T0+60 (refused:
    MaxUnavailable) and throttled a cycle later."""
    clock = [T0]

    class Five:
        def snapshot(self) -> ClusterSnapshot:
            return snapshot(FL5, workloads=[(WEB, (0,)), (WEB1, (16,)), (PENDING, ())], temps={0: 86}, time=clock[0])

    rec = Reconciler(source=Five(), actuator=Applies(),
                     policy=BalancerPolicy().with_section("safety", max_concurrent_migrations_per_node=1),
                     clock=lambda: clock[0])
    rec.ledger = SafetyLedger(migrations=((T0 - 90.0, "n2", "n1", "svc-x"), (T0 + 20.0, "n3", "n4", "web")))
    kinds = []
    for _ in range(3):
        kinds.append(sorted({a.kind for a in rec.run_once().plan.actions} - {"taint_node"}))
        clock[0] += 30.0
    assert kinds == [[], ["migrate"], ["power_limit"]], kinds   # before: [[], ["migrate"], ["migrate"]] (to n2)
    assert "inference/web-0" in rec.state.refused_moves
    # the guard: refused for n1 (the per-node limit's reason, as before), not for the target alone
    to_n1 = Migrate(workload="inference/web-0", source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="hot",
                    expected_gain=1.0)
    five = snapshot(FL5, workloads=[(WEB, (0,)), (WEB1, (16,)), (PENDING, ())], temps={0: 86}, time=T0 + 30.0)
    (_, exc), = SafetyGuard(LIMIT).review([to_n1], five, rec.ledger, T0 + 30.0).rejected
    assert exc.reason == "max_concurrent_migrations" and not exc.target_only, str(exc)
    # a PodDisruptionBudget given as data that allows web no disruption refuses it anywhere too; one that does, not
    alone = SafetyLedger(migrations=rec.ledger.migrations[:1])   # svc-x's landing on n1 only
    for max_unavailable, target_only in ((0, False), (1, True)):
        guard = SafetyGuard(LIMIT, pdbs=[PodDisruptionBudget(owner="web", max_unavailable=max_unavailable)])
        (_, exc), = guard.review([to_n1], five, alone, T0 + 30.0).rejected
        assert exc.reason == "max_concurrent_migrations" and exc.target_only is target_only, str(exc)


def test_a_cluster_pod_disruption_budget_allowing_no_eviction_makes_it_no_target_refusal_alone() -> None:
    """The cluster's own PodDisruptionBudgets are asked with the owner's limits: one that allows web-0 no eviction
    now refuses its move to any node, so the refusal for n1 (svc-x's replacement landing there) is not the target's
    alone, and the pod is not kept off n1 only to be proposed elsewhere and refused again."""
    labelled = replace(WEB, labels=MappingProxyType({"app": "web"}))
    to_n1 = Migrate(workload="inference/web-0", source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="hot",
                    expected_gain=1.0)
    base = snapshot(FL, workloads=[(labelled, (0,)), (PENDING, ())], temps={0: 86}, time=T0)
    for allowed, target_only in ((0, False), (1, True)):
        pdb = DisruptionBudget("web-pdb", "inference", Selector.from_json({"matchLabels": {"app": "web"}}), allowed)
        snap = replace(base, disruption_budgets=(pdb,))
        (_, exc), = SafetyGuard(LIMIT).review([to_n1], snap, landing("n2", "n1"), T0).rejected
        assert exc.reason == "max_concurrent_migrations" and exc.target_only is target_only, (allowed, str(exc))


FL4 = make_fleet(4, 4)
PENDING_Y = workload("y-new", owner="svc-y")   # svc-y's replacement, not placed: svc-y short 1


def test_a_node_whose_settling_move_is_its_owners_pending_one_is_kept_off_with_the_landing_ones() -> None:
    """Four nodes, limit 1: svc-x's replacement landing on n1 (moved 90 s before the first cycle); svc-y moved
    n3 -> n2 at T0+20, its replacement Pending (svc-y short 1). That move is still settling at T0+30, but it is the
    one svc-y is taken to wait on: past the settle window it counts as landing on n2, so n2 stays full like n1. The
    move to n1 refused at T0+30, the pod is kept off n1 and n2 at once. Before, only n1: n2 was proposed at T0+60 and
    refused, one node a cycle. n3, svc-y's source, is full only while the move settles, and is tried in its turn."""
    clock = [T0]

    class Four:
        def snapshot(self) -> ClusterSnapshot:
            return snapshot(FL4, workloads=[(WEB, (0,)), (PENDING, ()), (PENDING_Y, ())], temps={0: 86},
                            time=clock[0])

    rec = Reconciler(source=Four(), actuator=Applies(),
                     policy=BalancerPolicy().with_section("safety", max_concurrent_migrations_per_node=1),
                     clock=lambda: clock[0])
    rec.ledger = SafetyLedger(migrations=((T0 - 90.0, "n3", "n1", "svc-x"), (T0 + 20.0, "n3", "n2", "svc-y")))
    targets, full = [], []
    for _ in range(3):
        report = rec.run_once()
        targets.append(next((a.target_node for a in report.plan.actions if isinstance(a, Migrate)), None))
        full.append({n for w, n in rec.state.refused_targets if w == "inference/web-0"})
        clock[0] += 30.0
    assert targets == [None, "n1", "n3"], targets   # before: [None, "n1", "n2"]
    assert full[1] == {"n1", "n2"}, full   # before: {"n1"}
    # the guard: at T0+30 n1 (landing) and n2 (its owner's Pending one, settling) stay full; n3 frees at T0+80
    to_n1 = Migrate(workload="inference/web-0", source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="hot",
                    expected_gain=1.0)
    four = snapshot(FL4, workloads=[(WEB, (0,)), (PENDING, ()), (PENDING_Y, ())], temps={0: 86}, time=T0 + 30.0)
    ledger = SafetyLedger(migrations=((T0 - 90.0, "n3", "n1", "svc-x"), (T0 + 20.0, "n3", "n2", "svc-y")))
    (_, exc), = SafetyGuard(LIMIT).review([to_n1], four, ledger, T0 + 30.0).rejected
    assert exc.target_only and exc.full_nodes == {"n1", "n2"}, (exc.full_nodes, str(exc))
