"""The loop's log of unknown demand says the capacity hold of the services held for (`PlannerState.demand_held`), a
profiled one with no serving series at all among them. Before, it named `demand_unknown` alone and said the hold
whenever capacity held: an unprofiled NaN service (held for nothing) was said to hold capacity, and the profiled
service without series that did was never named."""

from __future__ import annotations

import logging
from dataclasses import replace
from functools import partial

from prometheus_client import CollectorRegistry

from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import HOLD_DEMAND_UNKNOWN, NO_SERIES, plan_with_capacity
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
    assert rec.run_once().status == "ok" and rec.state.demand_held.keys() == {"chat"}
    [line] = [r.getMessage() for r in caplog.records if "inference demand unknown" in r.getMessage()]
    assert "chat (no serving series" in line and f"embed ({WHY})" in line, line
    assert f"capacity shifting holds for chat (gputide_capacity_holding {HOLD_DEMAND_UNKNOWN})" in line, line
    assert "not for embed" in line, line


def test_the_log_says_why_as_the_planner_held_and_works_out_no_reason_of_its_own(caplog):
    """The reason a service is held for travels in `PlannerState.demand_held` ({service: why}): the loop logs it as
    the planner gave it. Before, the loop worked out `no_series_why` again for each service held, every cycle."""
    class Absent(Fleet):
        def snapshot(self):
            return super(Fleet, self).snapshot().replace(services={}, demand_unknown={})

    def planner(snap, forecasts, policy, state):
        p, st = plan_with_capacity(snap, forecasts, policy, state, profiles={"chat": PROFILES["chat"]},
                                   capacity_policy=CapacityPolicy())
        return p, replace(st, demand_held={n: f"as the planner said: {why}" for n, why in st.demand_held.items()})

    clock = [1000.0]
    fleet = Absent(clock)
    fleet.hot = False
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0],
                     metrics=ControllerMetrics(CollectorRegistry()), planner=planner)
    caplog.set_level(logging.INFO, logger="balancer.loop")
    assert rec.run_once().status == "ok"
    [line] = [r.getMessage() for r in caplog.records if "inference demand unknown" in r.getMessage()]
    assert f"chat (as the planner said: {NO_SERIES})" in line, line
