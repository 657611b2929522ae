"""A tide growth onto idle GPUs and a loan's sends its idle part alone only where the loan did not go for a lasting
cause: refused by the review (its guard's reason, not the hand-over's hold-back), or failed (an HPA KEDA keeps, RBAC).
Where the loan goes next cycle (held back for the ledger, `HeldForLedger`; dropped on the fresh snapshot; come back
RETRY), the growth is rejected whole and goes whole with the loan then: its idle part sent alone, the job's own
cooldown (`safety.cooldownS`, 600 s) refused the growth into the loan's GPUs the next cycle, and those GPUs sat idle
(review r2). Nor does the idle part of a job that restarts on resize go alone: it would restart twice, its workers
counted twice against the eviction budget (`loop._idle_workers`).

The fleet is tests/loop/test_loop_loan_growth_idle_part.py's: at T0+HOLD the tide grows fast onto GPU 7 (idle) and
the two GPUs chat's loan frees, 2 -> 5."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balancer.actuate.base import ActionResult, Outcome
from balancer.model import ScaleInference
from tests.loop.test_loop_held_back_loan_growth import Audit, Store, grows, loans, tide
from tests.loop.test_loop_loan_growth_idle_part import Wide


def test_a_growth_whose_loan_is_held_for_the_ledger_waits_whole_and_goes_with_the_loan() -> None:
    store = Store()
    rec, actuator, clock = tide(store)
    store.down = True   # the ledger with the loan's evictions unsaved: the hand-over holds the loan back
    rec.source, rec.audit = Wide(clock), Audit()
    report = rec.run_once()
    assert grows(report.plan.actions) == {"fast": (2, 5)}
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "eviction_budget"),
                                                                ("fast", "group_incomplete")]
    assert not actuator.sent and rec.source.reads == 1   # before: 2 -> 3 sent alone, on a fresh snapshot
    assert not any("sent alone" in r.get("detail", "") for r in rec.audit.records), rec.audit.records
    store.down, clock[0] = False, clock[0] + 60.0
    report = rec.run_once()
    assert not report.rejected, report.rejected   # before: fast's growth refused, cooldown
    assert loans(actuator.sent) == [1] and grows(actuator.sent) == {"fast": (2, 5)}


class Answers:
    """Applies everything but the loans, which come back `outcome`."""

    name = "live"

    def __init__(self, outcome: Outcome) -> None:
        self.outcome, self.sent = outcome, []

    def apply(self, action, snap):
        self.sent.append(action)
        loan = isinstance(action, ScaleInference) and action.replicas < action.previous_replicas
        return ActionResult(action, self.outcome if loan else Outcome.APPLIED)


@pytest.mark.parametrize(("outcome", "sent"), [(Outcome.RETRY, None), (Outcome.FAILED, (2, 3))])
def test_a_growths_idle_part_goes_alone_where_its_loan_failed_not_where_it_is_retried(outcome, sent) -> None:
    rec, _, clock = tide(Store())
    rec.actuator, rec.source = Answers(outcome), Wide(clock)
    report = rec.run_once()
    assert loans(rec.actuator.sent) == [1]
    assert ("fast", "group_incomplete") in [(a.target, why) for a, why in report.rejected]
    assert grows(rec.actuator.sent) == ({"fast": sent} if sent else {})   # RETRY: before, 2 -> 3 went alone


class Restarts(Wide):
    """`Wide`, fast restarting on resize (queued in Kueue without elastic slices, or torchrun elastic)."""

    def snapshot(self):
        snap = super().snapshot()
        return replace(snap, workloads=tuple(replace(w, restarts_on_resize=True) if w.owner == "fast" else w
                                             for w in snap.workloads))


def test_the_idle_part_of_a_job_that_restarts_on_resize_is_not_sent_alone() -> None:
    rec, actuator, clock = tide(Store(), refuse=True)
    rec.source = Restarts(clock)
    report = rec.run_once()
    growth = grows(report.plan.actions)
    assert growth and growth["fast"][0] == 2 and growth["fast"][1] > 3, report.plan.actions
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "cooldown"), ("fast", "group_incomplete")]
    assert not actuator.sent and rec.source.reads == 1   # before: 2 -> 3 sent alone, a second restart to follow
