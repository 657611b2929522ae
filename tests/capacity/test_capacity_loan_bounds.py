"""A loan's target is bounded on both sides (audit a8): it never grows the service, and what it keeps beyond the
reclaim rule is speculative, capped at the home allotment as every such part is. A service asking more replicas than
hold GPUs (pending ones) took the loan branch with a target above what it held, which apply_targets read as a
scale-up: training shrunk 'to make room for inference' by a loan decision, and a service above its cap grown further
(13 of a cap of 9, training 4 -> 1)."""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType

import numpy as np

from balancer.actions import ScaleInference, ScaleTraining
from balancer.model import Forecast
from balancer.plan.capacity import CapacityPolicy, CapacityView, JobView, ServiceCapacity, ServiceView
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled

POLICY = CapacityPolicy(headroom=0.0, reclaim_headroom=0.0, dead_band_replicas=1, dead_band_frac=0.0,
                        min_hold_s=1800.0)


def flat(value: float) -> Forecast:
    a = np.full(24, float(value))
    return Forecast(service="chat", issued_at=0.0, step_s=600.0, quantiles={0.5: a, 0.9: a, 0.99: a})


def cluster(replicas: int, demand: float, *, desired: int | None = None, home: int = 0, burst: float = 0.0,
            since: float = 0.0) -> CapacityView:
    profile = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0, min_replicas=1, home_replicas=home)
    service = ServiceView(profile=profile, demand_rps=demand, replicas=replicas, burst=burst, desired=desired,
                          gpus_by_model=MappingProxyType({"A100": replicas}))
    job = JobView(name="train", workers=4, elastic_max=12, since_checkpoint_s=since,
                  gpus_by_model=MappingProxyType({"A100": 4}), models=None)
    return CapacityView(time=0.0, free=MappingProxyType({"A100": 0}), services=(service,), jobs=(job,),
                        inference_gpus=replicas, training_gpus=4, total_gpus=replicas + 4)


def plan(v: CapacityView, demand: float, policy: CapacityPolicy = POLICY):
    d = plan_capacity(v, {"chat": flat(demand)}, policy, settled(v))
    scales = {(a.previous_replicas, a.replicas) for a in d.actions if isinstance(a, ScaleInference)}
    shrinks = [a for a in d.actions if isinstance(a, ScaleTraining) and a.workers < a.previous_workers]
    return d.targets["chat"], scales, shrinks


def test_a_loan_never_grows_a_service_with_pending_replicas():
    # 4 replicas hold GPUs, 8 asked; the reclaim rule needs 3, the keep floor (burst 0.5 on 30 req/s) 5: no loan (it
    # would shed none of the 4 holding GPUs) and no growth: the pending asks are held, shrinking no training (it
    # shrank a job 4 -> 3 for a fifth). They are not dropped either: they may be an HPA's (capacity_plan's docstring)
    for since in (0.0, 600.0):   # a job that checkpoints on SIGTERM, and one that loses work
        target, scales, shrinks = plan(cluster(4, 20.0, desired=8, burst=0.5, since=since), 30.0)
        assert (target, scales, shrinks) == (8, set(), [])


def test_what_a_loan_keeps_is_capped_at_the_home_allotment():
    # 14 replicas held, home allotment 8 (cap 9 with the 5 % margin), the forecast asking 11: the reclaim rule asks
    # 9 (capped), so a loan keeping 11 or 13 beyond it was speculative capacity past the cap
    slo_first = replace(POLICY, reclaim_quantile=0.99, keep_quantile=0.99, reclaim_headroom=0.15)
    target, scales, shrinks = plan(cluster(14, 50.0, home=8), 110.0, slo_first)
    assert (target, scales, shrinks) == (9, {(14, 9)}, [])
    # held 10 with 14 asked: no growth past the cap by shrinking training (was 13 of 9, training 4 -> 1)
    for policy in (slo_first, CapacityPolicy(dead_band_frac=0.0, min_hold_s=1800.0)):
        target, scales, shrinks = plan(cluster(10, 50.0, desired=14, home=8), 110.0, policy)
        assert (target, scales, shrinks) == (9, {(14, 9)}, [])
