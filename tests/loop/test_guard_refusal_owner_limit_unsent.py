"""A move the guard refused whole for its owner's limit (`maxUnavailablePerWorkload`), reached only through a move of
the same owner the same review accepted ahead of it, is let go at the cycle's end when that move did not go out
(`Reconciler._unlimited`): nothing of the owner was disrupted, and the move is proposed again next cycle. Before, it
stayed in the planner's `refused_moves` for `refusedRetryS` (five minutes: its hot GPU throttled instead), and was
counted in `gputide_migration_exclusions{scope="workload"}`.

The fleet: n0, n1, n2 of four GPUs; web-0 and web-1 (owner web) run hot on n0 (87 C); two of web's replicas may be
unavailable at once, and one is: web moved a pod n2 -> n1 at T0-10 (settling for 60 s), which the planner does not see.
At T0+10 the planner moves both off n0; the guard accepts web-0's (web at two) and refuses web-1's (max_unavailable)."""

from __future__ import annotations

import pytest
from loop_helpers import make_fleet, snapshot, workload
from prometheus_client import CollectorRegistry
from reads_down import ReadsDown
from refusing import Live, Unsaved, two_cycles

from balancer.actuate.base import Outcome
from balancer.config import BalancerPolicy, SafetyPolicy
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Migrate, Plan
from balancer.safety import PodDisruptionBudget, SafetyGuard, SafetyLedger

FL = make_fleet(3, 4)
T0 = 1000.0
WEB0, WEB1 = "inference/web-0", "inference/web-1"
POLICY = BalancerPolicy(safety=SafetyPolicy(max_unavailable_per_workload=2, max_concurrent_migrations_per_node=4))


def two_hot(now: float):
    return snapshot(FL, workloads=[(workload("web-0", owner="web"), (0,)), (workload("web-1", owner="web"), (1,))],
                    temps={0: 87, 1: 87}, time=now)


def second_cycle(how: str) -> tuple[Reconciler, ReadsDown, list[float], CollectorRegistry]:
    """The reconciler after its cycles at T0 (one hot reading: nothing planned) and T0+10, where web-0's move went out
    (`applied`), failed (`failed`), met a fresh read that failed (`stale`) or was held back by the hand-over, the
    ledger unsaved (`held`); the clock then at T0+20."""
    ledger = SafetyLedger(migrations=((T0 - 10.0, "n2", "n1", "web"),))
    rec, source, clock, registry, report = two_cycles(two_hot, POLICY, ledger, how, T0,
                                                      Unsaved() if how == "held" else None)
    if how != "stale":   # the review as described: both planned, web-1's refused for web's limit
        assert [a.workload for a in report.plan.actions if isinstance(a, Migrate)] == [WEB0, WEB1]
        assert (WEB1, "max_unavailable") in [(a.workload, why) for a, why in report.rejected]
    if how == "held":
        assert (WEB0, "eviction_budget") in [(a.workload, why) for a, why in report.rejected]
    return rec, source, clock, registry


def excluded(registry: CollectorRegistry) -> float | None:
    return registry.get_sample_value("gputide_migration_exclusions", {"scope": "workload"})


def test_a_refusal_for_an_owner_at_its_limit_through_a_move_that_went_out_stands() -> None:
    """web-0's move went out: web has two moves settling, at its limit, and web-1 is not moved for refusedRetryS."""
    rec, _, _, registry = second_cycle("applied")
    assert rec.state.refused_moves.get(WEB1) == T0 + 10.0
    assert excluded(registry) == 1
    report = rec.run_once()   # T0+20: web-1 is not proposed again (its hot GPU is throttled instead)
    assert WEB1 not in [a.workload for a in report.plan.actions if isinstance(a, Migrate)]


@pytest.mark.parametrize("how", ["failed", "stale", "held"])
def test_a_refusal_for_an_owner_at_its_limit_only_through_a_move_not_carried_out_is_let_go(how: str) -> None:
    """web-0's move did not go out (`how`): web has one move settling, and web-1's refusal is let go; the next cycle
    proposes it again, and moves it where web-0 is refused meanwhile (before: kept for refusedRetryS, its hot GPU
    throttled, counted in the exclusions)."""
    rec, _, _, registry = second_cycle(how)
    assert WEB1 not in rec.state.refused_moves, rec.state.refused_moves
    # web-0's own refusal is its own cause's: the actuator's failure, the hand-over's held eviction (a budget)
    assert (WEB0 in rec.state.refused_moves) == (how != "stale")
    assert excluded(registry) == (0 if how == "stale" else 1)   # before: one more
    report = rec.run_once()   # T0+20: proposed again
    assert WEB1 in [a.workload for a in report.plan.actions if isinstance(a, Migrate)]
    if how == "failed":   # web-0 refused for a while, web-1's move alone: web at two with it, accepted and carried out
        assert [r.action.workload for r in report.results if isinstance(r.action, Migrate)] == [WEB1]


def grouped_plan(snap, forecasts, policy, state):
    """web-0 off n0 alone, then web-1 with db-0, the two pods of GPU 1, as one group (`Migrate.group`: a GPU emptied
    whole or not at all); the planner's state passed on as it came."""
    def move(name: str, src: int, dst: int, group: str = "") -> Migrate:
        return Migrate(reason="test", expected_gain=2.0, workload=name, source_gpus=(src,), target_gpus=(dst,),
                       target_node="n1", group=group)
    return Plan(actions=(move(WEB0, 0, 4), move(WEB1, 1, 5, "g1"), move("inference/db-0", 1, 5, "g1"))), state


@pytest.mark.parametrize("limit", ["max_unavailable", "pdb"])
def test_a_group_refused_whole_for_one_members_owner_limit_is_let_go_whole(limit: str) -> None:
    """web-1's move is refused for web's limit (`maxUnavailablePerWorkload`, or a PodDisruptionBudget given as data),
    reached only through web-0's, which failed having changed nothing; db-0's, of web-1's group, is refused with it
    (group_incomplete). Both are let go: asked again together, the guard accepts the group (before: both kept for
    refusedRetryS); web-0's own failure keeps web-0's refusal."""
    clock, registry = [T0], CollectorRegistry()
    actuator = Live()
    actuator.fails = True
    pdb = limit == "pdb"
    policy = BalancerPolicy(safety=SafetyPolicy(max_unavailable_per_workload=5 if pdb else 2,
                                                max_concurrent_migrations_per_node=4))
    guard = SafetyGuard(policy.safety, pdbs=[PodDisruptionBudget("web", max_unavailable=2)] if pdb else ())
    rec = Reconciler(source=ReadsDown(clock, lambda now: snapshot(FL, workloads=[
        (workload("web-0", owner="web"), (0,)), (workload("web-1", owner="web", milli=500), (1,)),
        (workload("db-0", owner="db", milli=500), (1,))], time=now)), actuator=actuator, clock=lambda: clock[0],
        metrics=ControllerMetrics(registry), policy=policy, guard=guard, planner=grouped_plan)
    rec.ledger = SafetyLedger(migrations=((T0 - 10.0, "n2", "n1", "web"),))
    report = rec.run_once()
    assert sorted((a.workload, why) for a, why in report.rejected) == [
        ("inference/db-0", "group_incomplete"), (WEB1, "pdb" if pdb else "max_unavailable")]
    assert [(r.action.workload, r.outcome) for r in report.results] == [(WEB0, Outcome.FAILED)]
    assert set(rec.state.refused_moves) == {WEB0}   # before: web-1 and db-0 too
    assert excluded(registry) == 1
