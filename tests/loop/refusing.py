"""An actuator that fails one pod's migration, a Lease store that saves nothing and a reconciler after two cycles, for
the loop's tests of refusals
let go at a cycle's end when the move that made them did not go out (`Reconciler._unfilled`, `_unlimited`)."""

from __future__ import annotations

from collections.abc import Callable

from prometheus_client import CollectorRegistry
from reads_down import ReadsDown

from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy
from balancer.ledger_handover import LedgerHandover
from balancer.loop import CycleReport, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import ClusterSnapshot, Migrate
from balancer.safety import SafetyLedger


class Live:
    """Applies everything; a migration of `workload` fails for good, having changed nothing, when `fails`."""

    name = "live"

    def __init__(self, workload: str = "inference/web-0") -> None:
        self.workload, self.fails = workload, False

    def apply(self, action, snap):
        if self.fails and isinstance(action, Migrate) and action.workload == self.workload:
            return ActionResult(action, Outcome.FAILED, "forbidden")
        return ActionResult(action, Outcome.APPLIED)


class Unsaved:
    """A Lease store whose writes fail: the hand-over holds back every eviction the guard accepted."""

    def load_state(self) -> str:
        return ""

    def save_state(self, text: str) -> None:
        raise ConnectionError("apiserver went away")


def two_cycles(make: Callable[[float], ClusterSnapshot], policy: BalancerPolicy, ledger: SafetyLedger, how: str,
               t0: float, store: object = None) -> tuple[Reconciler, ReadsDown, list[float], CollectorRegistry,
                                                         CycleReport]:
    """A reconciler on `make`'s fleet (from `ledger`; handing it over through `store` when given) after its cycles at
    `t0` (one hot reading: nothing planned) and `t0`+10, where the fresh read before acting fails (`stale`), web-0's
    move fails (`failed`) or everything is applied (any other `how`); with its source, its clock (then at `t0`+20),
    its registry and the second cycle's report."""
    clock, registry = [t0], CollectorRegistry()
    source, actuator = ReadsDown(clock, make), Live()
    rec = Reconciler(source=source, actuator=actuator, clock=lambda: clock[0], metrics=ControllerMetrics(registry),
                     policy=policy)
    if store is not None:
        rec.handover = LedgerHandover(store, registry)
    rec.ledger = ledger
    assert rec.run_once().status == "ok"
    clock[0] = t0 + 10.0
    source.reads_left, actuator.fails = (1 if how == "stale" else None), how == "failed"
    report = rec.run_once()
    assert report.status == ("fail_static" if how == "stale" else "ok"), report
    clock[0] = t0 + 20.0
    source.reads_left = None
    return rec, source, clock, registry, report
