"""A negative forecast, or one asking for more replicas than the whole fleet could hold, is no forecast for its
service.

2a1da89 left out only NaN and infinite values (auditor a7, check_neg_forecast.py): a forecast of -30 req/s planned as
0 (the service 10 -> 2 replicas, its GPUs lent to training), and a finite 1e308 targeted 1,000,000 replicas and
scaled the training job to 0; near the float limit `replicas_for` overflowed (math.ceil(inf)) and ended the cycle.
The bound on a huge one is the fleet's: more replicas than its GPUs could hold at 1 milli-GPU each."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from balancer.model import Forecast
from balancer.plan.capacity_plan import plan_capacity, readable_forecasts
from tests.capacity.settled_state import settled
from tests.capacity.test_capacity_planner import POLICY, forecast, job, view

# 10 replicas + 4 training + 0 free = 14 GPUs; 10 req/s a replica: the fleet could hold 14,000 replicas, 140,000 req/s
BOUND_RPS = 14 * 1000 * 10.0


def _flat(value: float, q99: float | None = None) -> Forecast:
    return Forecast(service="chat", issued_at=0.0, step_s=600.0,
                    quantiles={0.5: np.full(24, value), 0.9: np.full(24, value),
                               0.99: np.full(24, value if q99 is None else q99)})


def _decision(d):
    return d.actions, dict(d.targets), d.split


@pytest.mark.parametrize(("fc", "why"), [
    (_flat(-30.0), "negative values in its quantile(s) 0.5, 0.9, 0.99"),
    (_flat(30.0, q99=-0.5), "negative values in its quantile(s) 0.99"),
    (_flat(1e308), "its peak needs more replicas than the whole fleet (14 GPUs) could hold at 1 milli-GPU each "
                   "(14000, at 10 req/s each)"),
    (_flat(BOUND_RPS + 1), "its peak needs more replicas than the whole fleet"),
], ids=["-30", "a negative p99", "1e308", "just past the bound"])
def test_an_out_of_range_forecast_plans_as_none_and_says_so(fc, why):
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12)])
    state = settled(v)
    got = plan_capacity(v, {"chat": fc}, POLICY, state)
    without = plan_capacity(v, {}, POLICY, state)
    assert _decision(got) == _decision(without)
    assert dict(got.targets) == {"chat": 10}   # was 2 (-30: lent) and 1,000,000 (1e308: training to 0)
    added = [n for n in got.notes if n not in without.notes]
    assert len(added) == 1 and added[0].startswith("chat: planned without its forecast") and why in added[0]


def test_near_the_float_limit_the_cycle_no_longer_overflows():
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12)])
    policy = replace(POLICY, headroom=0.15, reclaim_headroom=0.15)   # 1.6e308 x 1.15: inf
    state = settled(v)
    assert _decision(plan_capacity(v, {"chat": _flat(1.6e308)}, policy, state)) == \
        _decision(plan_capacity(v, {}, policy, state))


@pytest.mark.parametrize("value", [0.0, 300.0, BOUND_RPS], ids=["0", "2x the fleet", "at the bound"])
def test_a_forecast_within_range_is_read(value):
    """0 is demand; a surge beyond the fleet is read too (the planner reclaims what it can), up to the bound."""
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12)])
    state = settled(v)
    got = plan_capacity(v, {"chat": _flat(value)}, POLICY, state)
    assert not [n for n in got.notes if "planned without its forecast" in n]
    assert _decision(got) != _decision(plan_capacity(v, {}, POLICY, state))


def test_the_loop_predicate_leaves_out_negatives_and_only_the_planner_knows_the_fleet():
    """`Reconciler._forecast` calls it without a view: a negative forecast leaves the gauges too; a huge finite one is
    judged against a service's profile, which only the planner holds."""
    kept, notes = readable_forecasts({"chat": _flat(-1.0), "search": replace(forecast([1e308] * 24),
                                                                             service="search")})
    assert list(kept) == ["search"] and [n.split(":")[0] for n in notes] == ["chat"]
