"""A service whose scaling the actuator failed for good (FAILED: a Deployment another controller keeps, an HPA KEDA
generates) is left out of the capacity plan for `safety.cooldownS`: before, the same refused ScaleInference was
proposed every cycle, and training was shrunk each time to make room for a growth that could not happen.

The fleet (tests/capacity/test_capacity_clash.py's): chat, one replica on GPU 0, needs 3 more; no GPU is idle, so the
tide shrinks "cheap" (GPUs 1-4) for them."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from functools import partial

from balancer.actuate.base import ActionResult, Outcome
from balancer.loop import Reconciler
from balancer.model import Action, ClusterSnapshot, ScaleInference, ScaleTraining
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from tests.capacity.test_capacity_clash import ON, PROFILES, fleet_snapshot

JOBS = {"cheap": (1, 2, 3, 4), "other": (5, 6, 7)}
KEPT = ("failed", "refused", "deployment default/chat is kept by InferenceService/chat, which writes its replicas "
        "back: not scaled")
UNAVAILABLE = ("retry", "503", "hpa default/chat: HTTP 503 Service Unavailable")


@dataclass
class ScaleRefusing:
    """Answers every ScaleInference of `refused` with its (outcome, code, detail); applies the rest (the fleet it
    reads stays as it is)."""

    refused: dict[str, tuple[str, str, str]] = field(default_factory=dict)
    name: str = "scale-refusing"

    def apply(self, action: Action, snapshot: ClusterSnapshot) -> ActionResult:
        if isinstance(action, ScaleInference) and action.service in self.refused:
            outcome, code, detail = self.refused[action.service]
            return ActionResult(action, Outcome(outcome), detail, code)
        return ActionResult(action, Outcome.APPLIED)


class Source:
    def __init__(self, clock: list[float]) -> None:
        self.clock = clock

    def snapshot(self) -> ClusterSnapshot:
        return fleet_snapshot(JOBS, t=self.clock[0])


def run(refused: dict[str, tuple[str, str, str]], times: list[float]) -> tuple[Reconciler, list[tuple[Action, ...]]]:
    """The reconciler after a cycle at each of `times`, and each cycle's planned actions."""
    clock = [times[0]]
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=Source(clock), actuator=ScaleRefusing(refused), policy=ON, clock=lambda: clock[0],
                     planner=planner)
    plans = []
    for t in times:
        clock[0] = t
        plans.append(rec.run_once().plan.actions)
    return rec, plans


def chat_ups(actions: tuple[Action, ...]) -> list[Action]:
    return [a for a in actions if isinstance(a, ScaleInference) and a.service == "chat"]


def shrinks(actions: tuple[Action, ...]) -> list[Action]:
    return [a for a in actions if isinstance(a, ScaleTraining) and a.workers < a.previous_workers]


def test_a_refused_scale_is_not_proposed_again_nor_training_shrunk_for_it_until_the_cooldown_passed(caplog) -> None:
    """Refused at t=1000; at 1060 and 1300 chat is left alone (no scale-up, no shrink of cheap for it); past
    safety.cooldownS (600 s), at 1700, the tide tries again. The note saying so is logged once while it lasts."""
    with caplog.at_level(logging.INFO, logger="balancer.loop"):
        rec, plans = run({"chat": KEPT}, [1000.0, 1060.0, 1300.0, 1700.0])
    assert chat_ups(plans[0]) and shrinks(plans[0]), "the first cycle plans the growth and the room for it"
    for actions in plans[1:3]:
        assert chat_ups(actions) == [] and shrinks(actions) == [], actions
    assert chat_ups(plans[3]), "after the cooldown the service is planned again"
    assert isinstance(rec.state, planner_mod.PlannerState) and set(rec.state.refused_scales) == {"chat"}
    said = [r.getMessage() for r in caplog.records if "capacity leaves chat alone" in r.getMessage()]
    assert len(said) == 1, said


def test_a_temporary_failure_is_tried_again_next_cycle() -> None:
    rec, plans = run({"chat": UNAVAILABLE}, [1000.0, 1060.0])
    assert chat_ups(plans[1]) and rec.state.refused_scales == {}


def test_refuse_records_only_the_scales_it_is_given_and_the_planner_forgets_them_after_the_cooldown() -> None:
    up = ScaleInference(service="chat", replicas=4, previous_replicas=1, reason="rise", expected_gain=1.0)
    state = planner_mod.refuse(planner_mod.PlannerState(), [up], 1000.0)   # the guard's refusals: not the actuator's
    assert state.refused_scales == {}
    state = planner_mod.refuse(state, [up], 1000.0, scales=[up])
    assert dict(state.refused_scales) == {"chat": 1000.0}
    assert planner_mod.scales_held(state, ON, 1599.0) == {"chat": 1000.0}
    _, after = planner_mod.plan(fleet_snapshot(JOBS, t=1600.0), None, ON, state)
    assert after.refused_scales == {}
