"""A capacity hold ends with capacity shifting itself: a policy reloaded with `spec.capacity.enabled: false` (or the
profiles gone) returned the base plan with the PlannerState it was given, so a hold from before the reload
(`capacity_holding`) stayed set for ever: gputide_capacity_holding at 1, GputideCapacityHolding firing and the loop
logging that capacity shifting holds, for a planner that no longer ran (review r1 of session 32)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balancer import config
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_demand_unknown import Fleet

OFF = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=False))


@pytest.mark.parametrize("policy, profiles", [(OFF, {"chat": PROFILES["chat"]}), (ON, {})],
                         ids=["capacity turned off", "no profiles"])
def test_a_hold_is_cleared_once_capacity_shifting_no_longer_plans(policy, profiles):
    fleet = Fleet([1000.0])
    fleet.unknown, fleet.hot = True, False
    held = replace(planner_mod.PlannerState(), capacity_holding=frozenset({"inference_demand_unknown"}))
    _, state = plan_with_capacity(fleet.snapshot(), None, policy, held, profiles=profiles,
                                  capacity_policy=CapacityPolicy())
    assert state.capacity_holding == frozenset()
