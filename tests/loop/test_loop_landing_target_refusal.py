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

from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.model import ClusterSnapshot, Migrate
from balancer.plan.planner import PlannerState
from balancer.safety import SafetyGuard, SafetyLedger

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
