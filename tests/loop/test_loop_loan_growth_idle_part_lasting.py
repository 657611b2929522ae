"""A tide growth onto idle GPUs and a loan's sends its idle part alone unless the loan that did not go goes next
cycle or may have gone: held back for the ledger (`HeldForLedger`), it goes once the ledger is saved, and the growth
whole with it (its idle part sent alone, the job's own cooldown, `safety.cooldownS`, 600 s, refused the growth into
the loan's GPUs the next cycle, and those GPUs sat idle: review r2); come back with its outcome unknown, the next plan
sees. A loan refused by the review, dropped on the fresh snapshot, come back RETRY or FAILED (nothing changed) does
not go next cycle: a scale-down not sent waits out the service's hold (`capacity_loop.unsent`,
`CapacityPolicy.min_hold_s`, 30 minutes), so the idle part goes now (audit a13 of 6053c8f0: RETRY and a loan dropped
on the fresh snapshot rejected the growth whole, and the next cycle sent the idle part alone anyway, the loan only
30 minutes later; `loop._idle_workers`).

The fleet is tests/loop/test_loop_loan_growth_idle_part.py's: at T0+HOLD the tide grows fast onto GPU 7 (idle) and
the two GPUs chat's loan frees, 2 -> 5."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balancer.actuate.base import ActionResult, Outcome
from balancer.model import ScaleInference
from balancer.safety import EMERGENCY_LABEL
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


@pytest.mark.parametrize("outcome", [Outcome.RETRY, Outcome.FAILED])
def test_a_growths_idle_part_goes_alone_where_its_loan_came_back_retry_or_failed(outcome) -> None:
    rec, _, clock = tide(Store())
    rec.actuator, rec.source = Answers(outcome), Wide(clock)
    report = rec.run_once()
    assert loans(rec.actuator.sent) == [1]
    assert ("fast", "group_incomplete") in [(a.target, why) for a, why in report.rejected]
    assert grows(rec.actuator.sent) == {"fast": (2, 3)}   # RETRY: before, nothing (the loan waits its hold anyway)
    rec.actuator.outcome, clock[0] = Outcome.APPLIED, clock[0] + 60.0
    rec.actuator.sent.clear()
    rec.run_once()
    assert not loans(rec.actuator.sent)   # the loan waits out chat's hold: nothing of it goes next cycle


class Unknown(Answers):
    """Applies everything but the loans, which fail with their outcome unknown (a timeout)."""

    def __init__(self) -> None:
        super().__init__(Outcome.FAILED)

    def apply(self, action, snap):
        res = super().apply(action, snap)
        return res if res.outcome == Outcome.APPLIED else replace(res, maybe_applied=True)


def test_a_growth_whose_loans_outcome_is_unknown_waits_whole() -> None:
    """A loan whose outcome is unknown (`ActionResult.maybe_applied`) may have freed its GPUs: the growth waits whole
    for the next plan, which sees."""
    rec, _, clock = tide(Store())
    rec.actuator, rec.source = Unknown(), Wide(clock)
    report = rec.run_once()
    assert loans(rec.actuator.sent) == [1] and not grows(rec.actuator.sent)
    assert ("fast", "group_incomplete") in [(a.target, why) for a, why in report.rejected]


class Labelled(Wide):
    """`Wide`, its node n0 (chat's replicas) labelled emergency-stop from the second read on: the fresh snapshot before
    acting drops the loan, the plan's snapshot clean."""

    def snapshot(self):
        snap, stop = super().snapshot(), {EMERGENCY_LABEL: "true"} if self.reads > 1 else {}
        return replace(snap, nodes=tuple(replace(n, labels={**n.labels, **stop}) if n.name == "n0" else n
                                         for n in snap.nodes))


def test_a_growths_idle_part_goes_alone_where_the_fresh_snapshot_drops_its_loan() -> None:
    rec, actuator, clock = tide(Store())
    rec.source = Labelled(clock)
    report = rec.run_once()
    assert grows(report.plan.actions) == {"fast": (2, 5)}
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "emergency_stop"),
                                                                ("fast", "group_incomplete")]
    assert not loans(actuator.sent) and grows(actuator.sent) == {"fast": (2, 3)}   # before: nothing
