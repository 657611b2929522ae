"""`PlannerState.capacity_holding` is the set of hold reasons (a frozenset of gputide_capacity_holding's label
values), not their comma-joined string: the loop tested a reason by splitting the string, the metrics split it again,
and a reason was one `","` away from reading as two. Behaviour unchanged: the same reasons, the same series."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry

from balancer.metrics import ControllerMetrics
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import HOLD_DEMAND_UNKNOWN, HOLD_UNATTRIBUTED, plan_with_capacity
from balancer.plan.planner import PlannerState
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_capacity_hold_both_reasons import both
from tests.loop.test_loop_demand_unknown import Fleet


def test_the_reasons_are_a_frozenset_empty_when_it_plans():
    assert PlannerState().capacity_holding == frozenset()
    _, state = plan_with_capacity(both(), {}, ON, PlannerState(), profiles=PROFILES, capacity_policy=CapacityPolicy())
    assert type(state.capacity_holding) is frozenset
    assert state.capacity_holding == frozenset({HOLD_DEMAND_UNKNOWN, HOLD_UNATTRIBUTED})
    fleet = Fleet([1000.0])
    fleet.unknown = False   # chat's demand known: it plans
    _, state = plan_with_capacity(fleet.snapshot(), {}, ON, state, profiles=PROFILES, capacity_policy=CapacityPolicy())
    assert type(state.capacity_holding) is frozenset and not state.capacity_holding


def test_the_gauge_takes_the_set_and_refuses_a_string():
    reg = CollectorRegistry()
    m = ControllerMetrics(reg)
    m.set_capacity_holding(frozenset({HOLD_UNATTRIBUTED}))
    assert reg.get_sample_value("gputide_capacity_holding", {"reason": HOLD_UNATTRIBUTED}) == 1
    with pytest.raises(TypeError, match="not the string"):   # iterated, it would label a series per character
        m.set_capacity_holding(HOLD_UNATTRIBUTED)
