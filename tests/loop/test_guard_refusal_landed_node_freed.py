"""A node the guard refused a migration's target for, full with another owner's replacement still landing
(`MaxConcurrentMigrations.target_only`, `full_nodes`), is kept off only while the guard still counts it full: once
the replacement runs, the next cycle may propose it again (`planner.still_full`). Before, the pod was kept off it
for `refusedTargetRetryS` (600 s) whatever happened there: its hot GPU throttled, or the pod sent to a worse node, for
ten minutes after the node had room.

The fleet: n0 and n1 of four GPUs; web-0 runs hot on n0's GPU 0, n1 is the only target. svc-x moved a pod to n1 90 s
before the first cycle (past migrationSettleS, 60 s), its replacement Pending (svc-x short 1): n1 is full (limit 1).
Cycles 30 s apart: at T0+30 the move to n1 is refused, at T0+60 n1 is still full (throttled), at T0+90 svc-x's
replacement runs on n1."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy
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


def run(lands_at: float | None, cycles: int = 4) -> tuple[Reconciler, list[list[str]], list]:
    """The reconciler after `cycles` cycles 30 s apart, each cycle's planned actions ("migrate n1", "power_limit")
    and rejections; svc-x's replacement runs on n1's GPU 5 from `lands_at` (None: never)."""
    clock = [T0]

    class Source:
        def snapshot(self) -> ClusterSnapshot:
            landed = lands_at is not None and clock[0] >= lands_at
            return snapshot(FL, workloads=[(WEB, (0,)), (NEW, (5,) if landed else ())], temps={0: 86},
                            time=clock[0])

    rec = Reconciler(source=Source(), actuator=Applies(),
                     policy=BalancerPolicy().with_section("safety", max_concurrent_migrations_per_node=1),
                     clock=lambda: clock[0])
    rec.ledger = SafetyLedger(migrations=((T0 - 90.0, "n0", "n1", "svc-x"),))
    planned, rejected = [], []
    for _ in range(cycles):
        report = rec.run_once()
        planned.append(sorted(f"migrate {a.target_node}" if isinstance(a, Migrate) else a.kind
                              for a in report.plan.actions if a.kind != "taint_node"))
        rejected.append(report.rejected)
        clock[0] += 30.0
    return rec, planned, rejected


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
