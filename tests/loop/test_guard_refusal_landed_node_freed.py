"""A node the guard refused a migration's target for, full with another owner's replacement still landing
(`MaxConcurrentMigrations.target_only`, `full_nodes`), is kept off only while the guard still counts it full: once
the replacement runs, the next cycle may propose it again (`planner.still_full`). Before, the pod was kept off it
for `refusedTargetRetryS` (600 s) whatever happened there: its hot GPU throttled, or the pod sent to a worse node, for
ten minutes after the node had room.

The fleet: n0 and n1 of four GPUs; web-0 runs hot on n0's GPU 0, n1 is the only target. svc-x moved a pod to n1 90 s
before the first cycle (past migrationSettleS, 60 s), its replacement Pending (svc-x short 1): n1 is full (limit 1).
Cycles 30 s apart: at T0+30 the move to n1 is refused, at T0+60 n1 is still full (throttled), at T0+90 svc-x's
replacement runs on n1. The refused target itself is kept off so too, whatever held it full, even when a later
refusal names it among `full_nodes` (`named_full_later`)."""

from __future__ import annotations

from collections.abc import Callable

from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy
from balancer.fleet import Fleet
from balancer.loop import Reconciler
from balancer.model import ClusterSnapshot, Migrate
from balancer.safety import SafetyLedger

FL = make_fleet(2, 4)
T0 = 1000.0
WEB = workload("web-0", owner="web")
NEW = workload("x-new", owner="svc-x")   # svc-x's replacement of the pod it moved to n1


class Applies:
    name = "applies"

    def apply(self, action, snapshot: ClusterSnapshot) -> ActionResult:
        return ActionResult(action, Outcome.APPLIED)


def cycles(workloads: Callable[[float], list], ledger: SafetyLedger, fl: Fleet = FL,
           n: int = 4) -> tuple[Reconciler, list[list[str]], list]:
    """The reconciler after `n` cycles 30 s apart from T0 on `fl` with web-0 hot on GPU 0 and `workloads(now)` placed
    (workload, GPUs), from `ledger`: each cycle's planned actions ("migrate n1", "power_limit") and rejections."""
    clock = [T0]

    class Source:
        def snapshot(self) -> ClusterSnapshot:
            return snapshot(fl, workloads=[(WEB, (0,)), *workloads(clock[0])], temps={0: 86}, time=clock[0])

    rec = Reconciler(source=Source(), actuator=Applies(),
                     policy=BalancerPolicy().with_section("safety", max_concurrent_migrations_per_node=1),
                     clock=lambda: clock[0])
    rec.ledger = ledger
    planned, rejected = [], []
    for _ in range(n):
        report = rec.run_once()
        planned.append(sorted(f"migrate {a.target_node}" if isinstance(a, Migrate) else a.kind
                              for a in report.plan.actions if a.kind != "taint_node"))
        rejected.append(report.rejected)
        clock[0] += 30.0
    return rec, planned, rejected


def run(lands_at: float | None, n: int = 4) -> tuple[Reconciler, list[list[str]], list]:
    """`cycles` with svc-x's replacement running on n1's GPU 5 from `lands_at` (None: never)."""
    return cycles(lambda now: [(NEW, (5,) if lands_at is not None and now >= lands_at else ())],
                  SafetyLedger(migrations=((T0 - 90.0, "n0", "n1", "svc-x"),)), n=n)


def test_a_node_kept_off_as_full_is_proposed_again_once_the_replacement_holding_it_runs() -> None:
    rec, planned, rejected = run(lands_at=T0 + 90.0)
    assert planned[:3] == [[], ["migrate n1"], ["power_limit"]], planned
    assert [(a.target_node, why) for a, why in rejected[1]] == [("n1", "max_concurrent_migrations")]
    assert planned[3] == ["migrate n1"], planned   # before: [] (kept off n1 until T0+630, the GPU held throttled)
    assert not [a for a, _ in rejected[3] if isinstance(a, Migrate)], rejected[3]   # accepted
    assert not rec.state.refused_targets and not rec.state.full_targets


def test_a_node_still_full_stays_kept_off() -> None:
    rec, planned, _ = run(lands_at=None)
    assert [p for p in planned if "migrate n1" in p] == [["migrate n1"]], planned   # the refused one only
    assert set(rec.state.refused_targets) == {("inference/web-0", "n1")}
    assert rec.state.full_targets == {("inference/web-0", "n1")}


FL3 = make_fleet(3, 4)
Z_NEW = workload("z-new", owner="svc-z")   # svc-z's replacement of the pod it moved to n1
V_NEW = workload("v-new", owner="svc-v")   # svc-v's replacement of the pod it moved to n2, never running


def named_full_later(n: int = 5) -> tuple[Reconciler, list[list[str]], list]:
    """`cycles` on n0, n1, n2 (n1 web-0's best target, n2 the next): svc-y moved n2 -> n1 at T0-20, its replacement
    running, so n1 and n2 are full until it settles at T0+40; svc-z moved a pod to n1 and svc-v one to n2 at T0-60,
    each listing its replacement Pending from T0+60 (landing: n1 and n2 full), svc-z's running on n1 from T0+120."""
    def pending(now: float) -> list:
        return [] if now < T0 + 60.0 else [(Z_NEW, (5,) if now >= T0 + 120.0 else ()), (V_NEW, ())]
    ledger = SafetyLedger(migrations=((T0 - 60.0, "n2", "n1", "svc-z"), (T0 - 60.0, "n1", "n2", "svc-v"),
                                      (T0 - 20.0, "n2", "n1", "svc-y")))
    return cycles(pending, ledger, FL3, n)


def test_the_refused_target_is_kept_off_only_while_the_guard_counts_it_full_even_once_named_full_later() -> None:
    """The target itself is marked as the nodes the refusal names full (`loop._guard_refusals`): at T0+30 the move
    to n1 is refused for n1 alone, full with svc-y's move settling only (no `full_nodes`); at T0+60 web-0 is proposed
    n2, refused, and the guard names n1 and n2 full (the replacements landing); at T0+90 it is throttled; at T0+120
    svc-z's replacement runs and the pod goes to n1. Before, the target was left unmarked, which `planner.refuse`
    takes for the actuator's refusal: kept off for refusedTargetRetryS (600 s), and not marked when T0+60's refusal
    named it full either (its 600 s restarted only)."""
    rec, planned, rejected = named_full_later()
    assert planned[:4] == [[], ["migrate n1"], ["migrate n2"], ["power_limit"]], planned
    assert [[a.target_node for a, _ in r] for r in rejected[1:3]] == [["n1"], ["n2"]], rejected
    # before: ["power_limit"] (n1 kept off until T0+660, the GPU held throttled)
    assert planned[4] == ["migrate n1"], planned
    assert not [a for a, _ in rejected[4] if isinstance(a, Migrate)], rejected[4]   # accepted
    assert set(rec.state.refused_targets) == {("inference/web-0", "n2")}   # svc-v's replacement still landing
    assert rec.state.full_targets == {("inference/web-0", "n2")}
    rec, _, _ = named_full_later(n=2)   # refused at T0+30, full_nodes empty: the target is marked all the same
    assert rec.state.full_targets == {("inference/web-0", "n1")}, rec.state.full_targets   # before: empty
