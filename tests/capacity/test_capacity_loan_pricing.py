"""Loans keep what their reclaim would take back, and lossy grows are priced by the rollback they risk."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from balancer.model import Forecast
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled
from tests.capacity.test_capacity_planner import POLICY, inference_target, job, training_sizes, view


def test_a_loan_keeps_what_the_keep_quantile_needs_over_the_whole_loan_horizon():
    # p90 stays at 30 req/s for 4 h, p99 reaches 80 req/s an hour from now: beyond the reclaim lead, within the
    # loan horizon. With keepQuantile 0.99 (and reclaims at the p99), loaning down to the p90's 3 replicas would be
    # reclaimed an hour later, a rollback for it
    p90 = np.full(24, 30.0)
    p99 = p90.copy()
    p99[6:] = 80.0
    fc = Forecast(service="chat", issued_at=0.0, step_s=600.0, quantiles={0.5: p90, 0.9: p90, 0.99: p99})
    slo_first = replace(POLICY, reclaim_quantile=0.99, keep_quantile=0.99)
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12, since=600.0)])
    d = plan_capacity(v, {"chat": fc}, slo_first, settled(v))
    assert inference_target(d, 10) == 8
    assert training_sizes(d) == {"train-a": 6}
    # a job that checkpoints on SIGTERM (no work since its checkpoint) loses nothing to the reclaim, but the loan
    # would still be taken back an hour later, leaving the service a warm-up short: kept alike
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12, since=0.0)])
    d = plan_capacity(v, {"chat": fc}, slo_first, settled(v))
    assert inference_target(d, 10) == 8
    assert training_sizes(d) == {"train-a": 6}
    # the defaults (0.9, the loan quantile) lend to the p90 whatever the job loses: the keep rule adds nothing
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12, since=600.0)])
    d = plan_capacity(v, {"chat": fc}, POLICY, settled(v))
    assert inference_target(d, 10) == 3


def test_a_lossy_job_is_not_grown_when_the_reclaim_would_roll_back_more_than_the_loan_adds():
    # 7 idle GPUs for the 2 h loan horizon add 14 GPU-h; reclaimed 1 h past its checkpoint, the grown job
    # (40 + 7 GPUs) rolls back 47 GPU-h
    fc = {"chat": Forecast(service="chat", issued_at=0.0, step_s=600.0,
                           quantiles={q: np.full(24, 30.0) for q in (0.5, 0.9, 0.99)})}
    v = view(10, 20.0, jobs=[job("train-a", 40, emax=60, since=3600.0)])
    d = plan_capacity(v, fc, POLICY, settled(v))
    assert inference_target(d, 10) == 3
    assert training_sizes(d) == {}
    # just past its checkpoint (or checkpointing on SIGTERM: 0 s) the loan loses nothing: grown
    v = view(10, 20.0, jobs=[job("train-a", 40, emax=60, since=0.0)])
    assert training_sizes(plan_capacity(v, fc, POLICY, settled(v))) == {"train-a": 47}


def test_a_loan_keeps_the_burst_floor_the_forecast_demand_will_ask_for():
    # demand 20 req/s now, the forecast 30 for 4 h, a learned burst of 50 %: today's floor (20 x 1.5 = 30: 3
    # replicas) would lend down to 3, and the floor on the forecast demand (30 x 1.5 = 45) takes 2 back as soon as
    # demand reaches it: a rollback for a loan of minutes. The loan keeps 5
    fc = {"chat": Forecast(service="chat", issued_at=0.0, step_s=600.0,
                           quantiles={q: np.full(24, 30.0) for q in (0.5, 0.9, 0.99)})}

    def bursty(v):
        return replace(v, services=(replace(v.services[0], burst=0.5),))

    v = bursty(view(10, 20.0, jobs=[job("train-a", 4, emax=12, since=600.0)]))
    assert inference_target(plan_capacity(v, fc, POLICY, settled(v)), 10) == 5
    # a job that checkpoints on SIGTERM loses no work when the floor takes GPUs back, but capacity would flap and the
    # service wait a warm-up for the replicas the floor asks: the loan keeps 5 too (it lent down to 3 before)
    v = bursty(view(10, 20.0, jobs=[job("train-a", 4, emax=12, since=0.0)]))
    assert inference_target(plan_capacity(v, fc, POLICY, settled(v)), 10) == 5
