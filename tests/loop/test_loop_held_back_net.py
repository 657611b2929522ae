"""A loan the hand-over holds back (the safety ledger unsaved: tests/loop/test_loop_held_back_scale.py) waits until the
ledger is saved, but the latency net does not wait for it: the loan was never sent, so the service's replicas did not
change and there is no change to let take effect (`plan_capacity`'s `settled`). Before, the held loan counted as the
service's last change: with its p99 at 90% of its SLO from 10 s after the hold, chat (3 replicas) was not stepped
for its warm-up (300 s, no note saying why), 3 -> 4 only once that had passed; with no loan held it steps at once."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

from balancer.model import ScaleInference
from balancer.plan import planner
from balancer.plan.capacity import CapacityPolicy, CapacityState, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from tests.loop import test_loop_held_back_scale as fleet
from tests.loop.test_loop_held_back_scale import held_back, loans


def pressed(now: float):
    """chat as `test_loop_held_back_scale.chat`, its p99 at 90% of its SLO (0.45 s of 0.5 s)."""
    snap = fleet.chat(now)
    return replace(snap, services={"chat": replace(snap.services["chat"], p99_latency_s=0.45)})


def steps(actions) -> list[tuple[int, int]]:
    return [(a.previous_replicas, a.replicas) for a in actions
            if isinstance(a, ScaleInference) and a.replicas > a.previous_replicas]


def test_the_latency_net_steps_at_once_while_a_held_loan_waits_for_the_ledger() -> None:
    rec, store, actuator, clock, _ = held_back()   # the loan 3 -> 1 held at T, the Lease still not writable
    rec.source.snapshot = lambda: pressed(clock[0])
    report = rec.run_once()   # T + 10 s
    assert steps(report.plan.actions) == [(3, 4)], report.plan.notes   # before: none until T + 310 s
    assert steps(actuator.sent) == [(3, 4)] and not loans(actuator.sent)
    assert store.down and rec.handover.unsaved


def test_once_the_ledger_is_saved_the_step_since_holds_the_service() -> None:
    """The step went out after the loan was held: the service changed since, so the saved ledger lets no loan go (its
    hold counts from the step), and its memory is the step's."""
    rec, store, actuator, clock, _ = held_back()
    rec.source.snapshot = lambda: pressed(clock[0])
    rec.run_once()
    stepped_at = clock[0]
    rec.source.snapshot = lambda: fleet.chat(clock[0])   # the pressure gone
    clock[0] += 60.0
    store.down = False
    report = rec.run_once()
    assert not loans(report.plan.actions) and not loans(actuator.sent), report.plan.notes
    assert rec.state.capacity.last_change["chat"] == stepped_at and "chat" not in rec.state.capacity.first_seen
    assert not rec.state.held_scales


def test_a_service_with_a_change_known_before_its_held_loan_lends_nothing_until_the_ledger_is_saved() -> None:
    """The loan's hold counts from the held loan, not from the change before it (which the latency net reads): chat
    last changed at T0, a hold ago, when the loan is held; the plans after it lend nothing while the ledger stays
    unsaved (held from the change before the loan, long past, it was lent and held back again every cycle), and lend
    once it is saved."""
    profiles = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}
    plan = partial(plan_with_capacity, profiles=profiles, policy=fleet.ON, capacity_policy=CapacityPolicy())
    state = planner.PlannerState(capacity=CapacityState(last_change={"chat": fleet.T0}))
    for t in (fleet.T0 + 60.0, fleet.T0 + fleet.HOLD):
        before = state
        out, state = plan(fleet.chat(t), fleet.calm(fleet.chat(t)), state=state)
    assert loans(out.actions) == [1]
    state = planner.hold_back(state, out.actions, fleet.T0 + fleet.HOLD, before)
    assert state.capacity.last_change["chat"] == fleet.T0   # what the latency net reads
    for t in (fleet.T0 + fleet.HOLD + 10.0, fleet.T0 + fleet.HOLD + 70.0):
        out, state = plan(fleet.chat(t), fleet.calm(fleet.chat(t)), state=state)
        assert not loans(out.actions), out.notes
    t += 60.0
    out, _ = plan(fleet.chat(t), fleet.calm(fleet.chat(t)), state=planner.ledger_saved(state))
    assert loans(out.actions) == [1]   # saved: lent at once
    out, state = plan(pressed(t), fleet.calm(fleet.chat(t)), state=state)
    assert steps(out.actions) == [(3, 4)]   # unsaved: the net steps, within a warm-up of the held loan
    out, _ = plan(fleet.chat(t + 60.0), fleet.calm(fleet.chat(t + 60.0)), state=planner.ledger_saved(state))
    assert not loans(out.actions)   # the step since holds it
