"""The loop's log of unknown demand says the capacity hold of the services held for (`PlannerState.demand_held`), a
profiled one with no serving series at all among them. Before, it named `demand_unknown` alone and said the hold
whenever capacity held: an unprofiled NaN service (held for nothing) was said to hold capacity, and the profiled
service without series that did was never named."""

from __future__ import annotations

import logging
from functools import partial

from prometheus_client import CollectorRegistry

from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import HOLD_DEMAND_UNKNOWN, plan_with_capacity
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_demand_unknown import WHY, Fleet


def test_the_hold_is_logged_against_the_services_held_for(caplog):
    class Mixed(Fleet):   # chat (profiled): no series at all; embed (no profile): NaN
        def snapshot(self):
            return super(Fleet, self).snapshot().replace(services={}, demand_unknown={"embed": WHY})

    clock = [1000.0]
    fleet = Mixed(clock)
    fleet.hot = False
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0],
                     metrics=ControllerMetrics(CollectorRegistry()),
                     planner=partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]},
                                     capacity_policy=CapacityPolicy()))
    caplog.set_level(logging.INFO, logger="balancer.loop")
    assert rec.run_once().status == "ok" and rec.state.demand_held == {"chat"}
    [line] = [r.getMessage() for r in caplog.records if "inference demand unknown" in r.getMessage()]
    assert "chat (no serving series" in line and f"embed ({WHY})" in line, line
    assert f"capacity shifting holds for chat (gputide_capacity_holding {HOLD_DEMAND_UNKNOWN})" in line, line
    assert "not for embed" in line, line
