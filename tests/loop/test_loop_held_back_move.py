"""A move the hand-over holds back (the safety ledger with its eviction could not be saved for a successor:
`LedgerHandover.review` rejects it as `eviction_budget`) is no refusal of the guard's: its budget passed. It is kept
off only while the ledger stays unsaved (`planner.held_moves`): the next cycle whose start saves the ledger plans and
sends it. Before, it was refused like the guard's own refusals and not proposed again for `hotspots.refusedRetryS`
(minutes), its hot GPU throttled meanwhile though the ledger was saved a cycle later.

The fleet: n0, n1, n2 of four GPUs; web-0 runs hot on n0 (87 C). At T0 the planner sees the first hot reading; at
T0+10 it moves web-0, which the hand-over holds back while the Lease cannot be written (`Store.down`)."""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry
from reads_down import ReadsDown

from balancer.actions import SetPowerLimit
from balancer.actuate.base import ActionResult, Outcome
from balancer.config import BalancerPolicy
from balancer.ledger_handover import LedgerHandover
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Migrate

FL = make_fleet(3, 4)
T0 = 1000.0
WEB = "inference/web-0"


def hot(now: float):
    return snapshot(FL, workloads=[(workload("web-0", owner="web"), (0,))], temps={0: 87}, time=now)


class Store:
    """A Lease store whose writes fail while `down`."""

    def __init__(self) -> None:
        self.down, self.saved = False, ""

    def load_state(self) -> str:
        return ""

    def save_state(self, text: str) -> int:
        if self.down:
            raise ConnectionError("apiserver went away")
        self.saved = text
        return 0


class Sent:
    """Applies everything, keeping what it was sent."""

    name = "live"

    def __init__(self) -> None:
        self.sent: list = []

    def apply(self, action, snap):
        self.sent.append(action)
        return ActionResult(action, Outcome.APPLIED)


def held_back() -> tuple[Reconciler, Store, Sent, list[float], CollectorRegistry]:
    """The reconciler after its cycles at T0 and T0+10, the move of web-0 held back at T0+10; the clock at T0+20."""
    clock, registry, store, actuator = [T0], CollectorRegistry(), Store(), Sent()
    rec = Reconciler(source=ReadsDown(clock, hot), actuator=actuator, clock=lambda: clock[0],
                     metrics=ControllerMetrics(registry), policy=BalancerPolicy())
    rec.handover = LedgerHandover(store, registry)
    assert rec.run_once().status == "ok"
    clock[0], store.down = T0 + 10.0, True
    report = rec.run_once()
    assert [a.workload for a in report.plan.actions if isinstance(a, Migrate)] == [WEB]
    assert [(a.workload, why) for a, why in report.rejected] == [(WEB, "eviction_budget")]
    assert not any(isinstance(a, Migrate) for a in actuator.sent)
    assert registry.get_sample_value("gputide_actions_rejected_total", {"reason": "eviction_budget"}) == 1
    clock[0] = T0 + 20.0
    return rec, store, actuator, clock, registry


def moves(actuator: Sent) -> list[str]:
    return [a.workload for a in actuator.sent if isinstance(a, Migrate)]


def test_a_move_held_back_goes_the_next_cycle_once_the_ledger_is_saved() -> None:
    rec, store, actuator, _, registry = held_back()
    store.down = False
    report = rec.run_once()
    assert report.status == "ok" and not report.rejected, report
    assert moves(actuator) == [WEB]   # before: none, refused for refusedRetryS and web-0's GPU throttled instead
    assert WEB in store.saved   # its migration in the ledger a successor inherits
    assert WEB not in rec.state.refused_moves


def test_a_move_held_back_while_the_ledger_stays_unsaved_is_kept_off_its_gpu_throttled() -> None:
    """While the Lease still cannot be written, the move is not proposed again (each cycle held back): the hot GPU
    is throttled instead (a power cap evicts nothing, so it goes); once saved, the move goes."""
    rec, store, actuator, clock, registry = held_back()
    report = rec.run_once()
    assert report.status == "ok" and not report.rejected, report
    assert not moves(actuator) and any(isinstance(a, SetPowerLimit) for a in actuator.sent)
    assert registry.get_sample_value("gputide_migration_exclusions", {"scope": "workload"}) == 1
    clock[0], store.down = T0 + 30.0, False
    rec.run_once()
    assert moves(actuator) == [WEB]   # before: kept off until refusedRetryS had passed
    assert registry.get_sample_value("gputide_migration_exclusions", {"scope": "workload"}) == 0


def test_a_held_back_move_refused_meanwhile_keeps_its_whole_refused_retry() -> None:
    """`planner.refuse` ends the hold-back mark: a saved ledger then lets go only what was held back, not a refusal;
    and the mark goes with the keep-off once `refusedRetryS` has passed (`plan`)."""
    from balancer.plan import planner

    move = Migrate(workload=WEB, source_gpus=(0,), target_gpus=(4,), target_node="n1", reason="hot")
    other = Migrate(workload="inference/api-0", source_gpus=(1,), target_gpus=(5,), target_node="n1", reason="hot")
    state = planner.hold_back(planner.PlannerState(), [move, other], T0)
    assert state.held_moves == {WEB, "inference/api-0"}
    state = planner.refuse(state, [other], T0 + 5.0)
    assert state.held_moves == {WEB}
    saved = planner.ledger_saved(state)
    assert dict(saved.refused_moves) == {"inference/api-0": T0 + 5.0} and not saved.held_moves
    policy = BalancerPolicy()
    later = T0 + policy.hotspots.refused_retry_s + 10.0
    _, after = planner.plan(hot(later), None, policy, state)
    assert not after.refused_moves and not after.held_moves
