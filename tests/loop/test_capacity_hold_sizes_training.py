"""While capacity holds (a profiled service's demand unknown, or its pods unattributed) nothing grows training.

The tide sizes elastic training in capacity mode: the hotspot planner's give-back of workers it shrank and
co-location's give-back of a slack shrink are dropped for the jobs it sizes (`capacity_loop._tide_sizes_training`),
since they would grow a job into GPUs inference may need. The hold returned the base plan before that filter ran, so
during a hold both went out: training grew into free GPUs that may be held for the service's pending replicas (or
be reclaimed at once for it when its demand is known again, two restarts). Now the hold drops them as planning does,
with the same note. The hold keeps their shrink records (`shrunk`, co-location's memory): forgotten, as planning
forgets them once the tide sizes the jobs, a job held short for the whole hold was owed nowhere (no
gputide_shrunk_workers, GputideTrainingShrunkTooLong silent); the tide forgets them once it plans again."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balancer.fleet_usage import owed_workers
from balancer.model import Plan, ScaleTraining
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.colocation import ColocationState
from balancer.plan.planner import PlannerState
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_demand_unknown import WHY, Fleet
from tests.loop.test_shrink_record_capacity import owed, with_capacity  # noqa: F401  (fixture)

GROW = ScaleTraining(reason="hotspot give-back", job="cheap", workers=6, previous_workers=4, shrunk_from=0)
GIVE = ScaleTraining(reason="slack", job="other", workers=5, previous_workers=3, cause="colocation_slack")


def grows(plan: Plan) -> list[ScaleTraining]:
    return [a for a in plan.actions if isinstance(a, ScaleTraining) and a.workers > a.previous_workers]


def test_the_hotspot_give_back_is_dropped_while_an_unknown_demand_holds(owed):  # noqa: F811
    snap, forecasts, profiles, job = owed
    svc = sorted(profiles)[0]
    held = snap.replace(services={k: v for k, v in snap.services.items() if k != svc}, demand_unknown={svc: WHY})
    p, state = with_capacity(held, {k: v for k, v in forecasts.items() if k != svc}, profiles)
    assert state.capacity_holding == {"inference_demand_unknown"}
    assert grows(p) == [], [a.describe() for a in grows(p)]
    assert [n for n in p.notes if n.startswith(f"dropped scale_training {job}:")]


def test_the_workers_held_back_stay_owed_through_the_hold_and_the_tide_takes_them_once_it_plans(owed):  # noqa: F811
    snap, forecasts, profiles, job = owed
    svc = sorted(profiles)[0]
    held = snap.replace(services={k: v for k, v in snap.services.items() if k != svc}, demand_unknown={svc: WHY})
    _, state = with_capacity(held, {k: v for k, v in forecasts.items() if k != svc}, profiles)
    _, state = with_capacity(held, {k: v for k, v in forecasts.items() if k != svc}, profiles, state)
    assert state.capacity_holding == {"inference_demand_unknown"} and job in state.shrunk
    assert owed_workers(held, state.shrunk, state.colocation.shrunk)["hotspot"] == {job: 1}
    _, state = with_capacity(snap, forecasts, profiles, state)   # known again: the tide sizes it
    assert state.capacity_holding == frozenset() and job not in state.shrunk


def test_co_locations_memory_of_a_slack_shrink_stays_through_the_hold():
    fleet = Fleet([1000.0])
    fleet.hot = False

    def base(snapshot, forecasts, policy, state):
        return Plan(actions=(GIVE,)), state

    before = PlannerState(colocation=ColocationState(shrunk={"other": (5, "chat")}))
    plan, state = plan_with_capacity(fleet.snapshot(), {}, ON, before, profiles={"chat": PROFILES["chat"]},
                                     capacity_policy=CapacityPolicy(), base=base)
    assert grows(plan) == [] and dict(state.colocation.shrunk) == {"other": (5, "chat")}


def hold(how: str, models: frozenset[str] | None = None) -> tuple[Plan, PlannerState]:
    fleet = Fleet([1000.0])
    fleet.unknown, fleet.hot = how == "unknown", False
    snap = fleet.snapshot()
    if how == "unattributed":   # chat reports its replica, its pod has no owner
        snap = snap.replace(workloads=tuple(replace(w, owner="") if w.owner == "chat" else w for w in snap.workloads))

    def base(snapshot, forecasts, policy, state):
        return Plan(actions=(GROW, GIVE)), (state or PlannerState())

    return plan_with_capacity(snap, {}, ON, PlannerState(), profiles={"chat": replace(PROFILES["chat"], models=models)},
                              capacity_policy=CapacityPolicy(), base=base)


@pytest.mark.parametrize("how", ["unknown", "unattributed"])
def test_neither_give_back_goes_out_during_either_hold(how):
    plan, state = hold(how)
    assert state.capacity_holding == {{"unknown": "inference_demand_unknown", "unattributed": "unattributed_pods"}[how]}
    assert grows(plan) == [], [a.describe() for a in plan.actions]
    assert {n.split(":")[0] for n in plan.notes if n.startswith("dropped")} == {
        "dropped scale_training cheap", "dropped scale_training other"}


@pytest.mark.parametrize(("how", "models", "dropped"), [
    ("unknown", frozenset({"H100-SXM5-80GB"}), False),   # the fleet's GPUs are all A100s: chat could use none
    ("unknown", frozenset({"A100-SXM4-80GB", "H100-SXM5-80GB"}), True),
    ("unattributed", frozenset({"H100-SXM5-80GB"}), True),   # no service named: every job's
])
def test_a_hold_drops_the_give_backs_of_jobs_on_models_a_held_service_may_use_only(how, models, dropped):
    """Before, a job whose GPUs the service whose demand is unknown could never take stayed short for the hold."""
    plan, _ = hold(how, models)
    assert (grows(plan) == []) is dropped and (grows(plan) == [GROW, GIVE]) is not dropped
    assert bool([n for n in plan.notes if n.startswith("dropped")]) is dropped
