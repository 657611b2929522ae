"""The loop's log of unknown demand says whether capacity holds for it. Before, it said "the capacity planner holds"
whatever the services: one with no capacity profile (or capacity shifting off) holds nothing, and an operator read
that capacity was frozen when the tide went on."""

from __future__ import annotations

import logging
from functools import partial

from prometheus_client import CollectorRegistry

from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_demand_unknown import WHY, Fleet


def said(caplog, profiles) -> tuple[list[str], CollectorRegistry]:
    clock = [1000.0]
    fleet, reg = Fleet(clock), CollectorRegistry()
    fleet.hot = False
    planner = partial(plan_with_capacity, profiles=profiles, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0], planner=planner,
                     metrics=ControllerMetrics(reg))
    caplog.set_level(logging.INFO, logger="balancer.loop")
    for k in range(2):
        clock[0] = 1000.0 + 60.0 * k
        rec.run_once()
    return [r.getMessage() for r in caplog.records if "inference demand unknown for chat" in r.getMessage()], reg


def test_a_service_without_a_profile_is_not_said_to_hold_capacity(caplog):
    lines, reg = said(caplog, {"embed": PROFILES["embed"]})   # chat unknown, not profiled
    assert reg.get_sample_value("gputide_capacity_holding", {"reason": "inference_demand_unknown"}) is None
    assert len(lines) == 1 and WHY in lines[0], lines
    assert "capacity shifting holds" not in lines[0] and "does not hold" in lines[0], lines[0]


def test_a_profiled_service_is_said_to_hold_capacity(caplog):
    lines, reg = said(caplog, {"chat": PROFILES["chat"]})
    assert reg.get_sample_value("gputide_capacity_holding", {"reason": "inference_demand_unknown"}) == 1
    assert len(lines) == 1 and "capacity shifting holds" in lines[0], lines
