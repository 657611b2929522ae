"""A growth onto GPUs idle already and a loan's sends its idle part when the loan does not go. The tide grows a job
into the idle GPUs first, then into those its loans (inference scale-downs) free, in one growth naming the loans
(`capacity_pools.Pools.training_actions`); the loop does not send a growth whose loan did not go (`loop._on_loans`).
Rejected whole, the idle GPUs it took stayed idle until the next cycle's plan; now the plan counts the workers the
idle GPUs hold (`ScaleTraining.idle_workers`) and the loop sends the growth reduced to them (`loop._reduced`), the
loan's part rejected as before (`group_incomplete`).

The fleet is tests/loop/test_loop_held_back_loan_growth.py's with fast (priority 5, two workers) allowed five: at
T0+HOLD the tide grows it onto GPU 7 (idle) and the two GPUs chat's loan frees, 2 -> 5, and slow not at all."""

from __future__ import annotations

import threading
from dataclasses import replace

from balancer.model import ScaleTraining
from tests.loop.test_loop_held_back_loan_growth import Audit, RefusesLoans, Store, fleet, grows, loans, tide


class Wide:
    """The fleet with fast allowed five workers. Counts its reads."""

    def __init__(self, clock: list[float]) -> None:
        self.clock, self.reads = clock, 0

    def snapshot(self):
        self.reads += 1
        snap = fleet(self.clock[0])
        return replace(snap, workloads=tuple(replace(w, elastic_max=5) if w.owner == "fast" else w
                                             for w in snap.workloads))


def test_a_growth_onto_idle_and_refused_loans_gpus_sends_its_idle_part() -> None:
    rec, actuator, clock = tide(Store(), refuse=True)
    rec.source, rec.audit = Wide(clock), Audit()
    report = rec.run_once()
    assert loans(report.plan.actions) == [1]
    assert grows(report.plan.actions) == {"fast": (2, 5)}
    growth = next(a for a in report.plan.actions if isinstance(a, ScaleTraining))
    assert (growth.service, growth.idle_workers) == ("chat", 1) and growth.idle_gain > 0
    # the loan's part rejected, counted and audited as before; the worker on GPU 7 goes (before: nothing was sent)
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "cooldown"), ("fast", "group_incomplete")]
    assert grows(actuator.sent) == {"fast": (2, 3)} and rec.source.reads == 2   # checked on a fresh snapshot first
    sent = actuator.sent[0]
    assert sent.expected_gain == growth.idle_gain and not sent.service and "reduced to +1" in sent.reason
    held = [r for r in rec.audit.records if r["outcome"] == "rejected:group_incomplete"]
    assert len(held) == 1 and "its +1 workers on GPUs idle already sent alone" in held[0]["detail"], rec.audit.records
    went = [r for r in rec.audit.records if r["target"] == "fast" and not r["outcome"].startswith("rejected")]
    assert len(went) == 1 and "reduced to +1" in went[0]["reason"], rec.audit.records


def test_an_idle_part_below_the_guards_minimum_gain_is_not_sent() -> None:
    """The guard accepted the whole growth on its gain; the idle part alone gains less, and one below the minimum
    (`safety.minExpectedGain`) is not sent: the growth is rejected whole, as before."""
    rec, _, clock = tide(Store(), refuse=True)
    rec.source = Wide(clock)
    growth = next(a for a in rec.run_once().plan.actions if isinstance(a, ScaleTraining))
    assert 0 < growth.idle_gain < growth.expected_gain
    rec, actuator, clock = tide(Store(), refuse=True)
    rec.source = Wide(clock)
    rec.guard = RefusesLoans(replace(rec.guard.policy, min_expected_gain=(growth.idle_gain + growth.expected_gain) / 2))
    report = rec.run_once()
    assert grows(report.plan.actions) == {"fast": (2, 5)}
    assert ("fast", "group_incomplete") in [(a.target, why) for a, why in report.rejected]
    assert not grows(actuator.sent) and rec.source.reads == 1   # nothing to send: no fresh snapshot read


class FailsFresh(Wide):
    """`Wide`, its fresh snapshot before acting (the second read) failing."""

    def snapshot(self):
        if self.reads:
            self.reads += 1
            raise TimeoutError("prometheus did not answer")
        return super().snapshot()


def test_a_cycle_whose_idle_part_is_below_the_minimum_gain_reads_no_fresh_snapshot() -> None:
    """Only an idle part the guard's minimum gain lets go is sent (`loop._idle_workers`): a cycle whose growth has none
    such sends nothing, and reads no fresh snapshot (`loop._sends_nothing`). Before, it read one, and when that read
    failed the cycle held fail-static: the growth's rejection was neither audited nor counted."""
    rec, _, clock = tide(Store(), refuse=True)
    rec.source = Wide(clock)
    growth = next(a for a in rec.run_once().plan.actions if isinstance(a, ScaleTraining))
    rec, actuator, clock = tide(Store(), refuse=True)
    rec.source, rec.audit = FailsFresh(clock), Audit()
    rec.guard = RefusesLoans(replace(rec.guard.policy, min_expected_gain=(growth.idle_gain + growth.expected_gain) / 2))
    report = rec.run_once()
    assert report.status == "ok" and rec.source.reads == 1, report
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "cooldown"), ("fast", "group_incomplete")]
    held = [r for r in rec.audit.records if r["outcome"] == "rejected:group_incomplete"]
    assert len(held) == 1 and "sent alone" not in held[0]["detail"], rec.audit.records
    assert rec.metrics.registry.get_sample_value("gputide_actions_rejected_total",
                                                 {"reason": "group_incomplete"}) == 1
    assert not actuator.sent


class StopsAtFresh(Wide):
    """`Wide`, the controller told to stop (SIGTERM) as it reads the fresh snapshot before acting."""

    def __init__(self, clock: list[float], stop: threading.Event) -> None:
        super().__init__(clock)
        self.stop = stop

    def snapshot(self):
        if self.reads:
            self.stop.set()
        return super().snapshot()


def test_a_growth_with_an_idle_part_stopped_before_it_is_rejected_once() -> None:
    """A stop checked before the growth rejects it whole, once (`shutting_down`). Before, its idle part was taken
    first: the growth rejected as `group_incomplete` with its idle part "sent alone", then that part rejected as
    `shutting_down`: two rejections counted for one growth, and an audit saying a part went that never did."""
    rec, actuator, clock = tide(Store(), refuse=True)
    stop = threading.Event()
    rec.source, rec.audit = StopsAtFresh(clock, stop), Audit()
    report = rec.run_once(stop)
    assert grows(report.plan.actions) == {"fast": (2, 5)} and rec.source.reads == 2
    assert [(a.target, why) for a, why in report.rejected] == [("chat", "cooldown"), ("fast", "shutting_down")]
    assert grows(a for a, _ in report.rejected) == {"fast": (2, 5)}   # the growth as planned, not its idle part
    count = rec.metrics.registry.get_sample_value
    assert count("gputide_actions_rejected_total", {"reason": "shutting_down"}) == 1
    assert not count("gputide_actions_rejected_total", {"reason": "group_incomplete"})
    assert not any("sent alone" in r.get("detail", "") for r in rec.audit.records), rec.audit.records
    assert not actuator.sent
