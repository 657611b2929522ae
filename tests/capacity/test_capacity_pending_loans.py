"""A loan counts the GPUs it frees, and its reason says what set its target (review of the loan branch).

* Replicas asked but pending hold no GPU. The loan's dead band and its gain (GPU-hours given training) counted them:
  a scale-down of pending replicas alone passed for a 'loan to training' that freed nothing, a loan of one held
  replica past a band of two went out on the pending ones beside it, and the gain of a loan that also dropped pending
  asks counted those as GPU-hours lent. Now the band and the gain count the replicas holding GPUs; pending replicas
  the reclaim rule does not need are dropped as a change of their own, not a loan.
* The reason named the loan quantile ('p90 demand stays below ...') whatever set the target: the keep quantile's
  burst floor, the reclaim quantile, the cap.
"""

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
HOURS = POLICY.loan_horizon_s / 3600.0


def forecast(p90: float, p99: float | None = None) -> Forecast:
    a = np.full(24, float(p90))
    return Forecast(service="chat", issued_at=0.0, step_s=600.0,
                    quantiles={0.5: a, 0.9: a, 0.99: np.full(24, float(p99 if p99 is not None else p90))})


def cluster(replicas: int, *, desired: int | None = None, demand: float = 20.0, burst: float = 0.0,
            home: int = 0) -> CapacityView:
    profile = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0, min_replicas=1, home_replicas=home)
    service = ServiceView(profile=profile, demand_rps=demand, replicas=replicas, desired=desired, burst=burst,
                          gpus_by_model=MappingProxyType({"A100": replicas}))
    job = JobView(name="train", workers=4, elastic_max=32, gpus_by_model=MappingProxyType({"A100": 4}))
    return CapacityView(time=0.0, free=MappingProxyType({"A100": 0}), services=(service,), jobs=(job,),
                        inference_gpus=replicas, training_gpus=4, total_gpus=replicas + 4)


def plan(v: CapacityView, fc: Forecast, policy: CapacityPolicy = POLICY):
    d = plan_capacity(v, {"chat": fc}, policy, settled(v))
    scale = next(a for a in d.actions if isinstance(a, ScaleInference))
    grown = sum(a.workers - a.previous_workers for a in d.actions if isinstance(a, ScaleTraining))
    return scale, grown


def test_pending_replicas_alone_are_dropped_not_lent():
    # 4 hold GPUs, 8 asked; the forecast needs the 4: the 4 pending asks go, but nothing is lent (was 'loan to
    # training', gain 4 replicas x 2 h of GPUs lent)
    scale, grown = plan(cluster(4, desired=8), forecast(40.0))
    assert (scale.previous_replicas, scale.replicas, grown) == (8, 4, 0)
    assert scale.reason.startswith("drop 4 pending replicas: the 4 holding GPUs cover") and "loan" not in scale.reason
    assert "nothing lent" in scale.reason


def test_a_loan_beside_pending_replicas_gains_only_the_gpus_it_frees():
    # 6 hold GPUs, 10 asked, the forecast needs 4: the loan frees 2 replicas' GPUs, which training grows into; its
    # gain is those 2 over the loan horizon (was 6: the 4 pending counted as lent)
    scale, grown = plan(cluster(6, desired=10), forecast(40.0))
    assert (scale.previous_replicas, scale.replicas, grown) == (10, 4, 2)
    assert scale.expected_gain == 2 * 1 * HOURS
    assert scale.reason.startswith("loan to training: ") and scale.reason.endswith("; drops its 4 pending replicas")
    # without pending replicas the loan is as before
    scale, grown = plan(cluster(6), forecast(40.0))
    assert (scale.previous_replicas, scale.replicas, grown, scale.expected_gain) == (6, 4, 2, 2 * 1 * HOURS)
    assert scale.reason == "loan to training: p90 demand stays below 40 req/s for 2.0 h"


def test_the_dead_band_counts_the_replicas_holding_gpus():
    # band 2: 5 hold GPUs and the forecast needs 4, so a loan would free one (below the band); 5 pending asks beside
    # them made it 6 and the one replica was lent. Now only the pending asks go, and training grows into nothing
    scale, grown = plan(cluster(5, desired=10), forecast(40.0), replace(POLICY, dead_band_replicas=2))
    assert (scale.previous_replicas, scale.replicas, grown) == (10, 5, 0)
    assert scale.reason.startswith("drop 5 pending replicas")
    # fewer pending asks than the band: held as before
    d = plan_capacity(cluster(5, desired=6), {"chat": forecast(40.0)}, replace(POLICY, dead_band_replicas=2),
                      settled(cluster(5, desired=6)))
    assert d.actions == () and d.targets["chat"] == 6


def test_a_loans_reason_names_what_set_its_target():
    # the keep quantile's burst floor: p90 40 req/s x 1.5 needs 6 (the loan quantile alone 4)
    scale, _ = plan(cluster(10, burst=0.5), forecast(40.0))
    assert scale.replicas == 6
    assert scale.reason == "loan to training: keeps what p90 demand (40 req/s within 2.0 h) needs with its 50% burst floor"
    # the reclaim quantile (p99, 70 req/s over the reclaim lead) above what the keep quantile keeps
    scale, _ = plan(cluster(10), forecast(40.0, p99=70.0), replace(POLICY, reclaim_quantile=0.99))
    assert scale.replicas == 7
    assert scale.reason == "loan to training: keeps what p99 demand (70 req/s within 15 min) needs"
    # the cap: home allotment 5 with the 5 % margin holds 6, the forecast would keep 8
    scale, _ = plan(cluster(10, home=5), forecast(80.0))
    assert scale.replicas == 6
    assert scale.reason.startswith("loan to training: keeps its cap, 6 replicas (home allotment 5 with the 5% margin")
