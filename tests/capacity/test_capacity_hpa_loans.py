"""A loan under an HPA frees only what the HPA gives up (review finding, session 30).

For a service an HPA scales, a loan writes only the HPA's minReplicas (`k8s_inference.scale`): the HPA then runs
max(that floor, what its own metrics ask for). The plan counted every replica above the new floor as freed: the
loan's gain (GPU-hours given training) counted them, and training was grown onto their GPUs in the same plan, so
while the HPA kept them the grown workers stayed pending and the loan was over-stated. Now (`ServiceView.hpa_wants`)
the loan frees, counts and grows training onto only the replicas above both; the floor still goes down to what the
forecast keeps, so the HPA may follow when its metrics fall (those GPUs are lent once they show idle). A service no
HPA scales (`hpa_wants` None: every simulator and bench view) plans as before.
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

POLICY = CapacityPolicy(headroom=0.0, reclaim_headroom=0.0, dead_band_replicas=1, dead_band_frac=0.0)
HOURS = POLICY.loan_horizon_s / 3600.0


def cluster(hpa_wants: int | None, *, replicas: int = 8, free: int = 0) -> CapacityView:
    """8 replicas on 8 A100s, demand (and its forecast) for 2: the forecast keeps 2, so the loan's floor is 2."""
    profile = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0, min_replicas=1)
    service = ServiceView(profile=profile, demand_rps=20.0, replicas=replicas, hpa_wants=hpa_wants,
                          gpus_by_model=MappingProxyType({"A100": replicas}))
    job = JobView(name="train", workers=4, elastic_max=32, gpus_by_model=MappingProxyType({"A100": 4}))
    return CapacityView(time=0.0, free=MappingProxyType({"A100": free}), services=(service,), jobs=(job,),
                        inference_gpus=replicas, training_gpus=4, total_gpus=replicas + 4 + free)


def plan(v: CapacityView, policy: CapacityPolicy = POLICY):
    a = np.full(24, 20.0)
    fc = Forecast(service="chat", issued_at=0.0, step_s=600.0, quantiles={0.5: a, 0.9: a, 0.99: a})
    d = plan_capacity(v, {"chat": fc}, policy, settled(v))
    scales = [a for a in d.actions if isinstance(a, ScaleInference)]
    grown = sum(a.workers - a.previous_workers for a in d.actions if isinstance(a, ScaleTraining))
    return scales, grown


def test_without_an_hpa_the_loan_frees_every_replica_above_its_target():
    for wants in (None, 0, 1, 2):   # no HPA, or one whose metrics ask for no more than the floor
        (scale,), grown = plan(cluster(wants))
        assert scale.replicas == 2 and scale.expected_gain == 6 * HOURS and grown == 6
        assert "HPA keeps" not in scale.reason


def test_the_floor_goes_down_but_the_loan_frees_only_what_the_hpa_gives_up():
    # the HPA's metrics ask for 5: lowering its floor to 2 leaves 5 running, so 3 GPUs free, not 6 (before: gain
    # 6 replicas x 2 h, training +6, three of them pending on GPUs the HPA kept)
    (scale,), grown = plan(cluster(5))
    assert scale.replicas == 2   # the floor is still the forecast's: the HPA may follow its metrics down
    assert scale.expected_gain == 3 * HOURS
    assert grown == 3
    assert "its HPA keeps 5, what its metrics ask for" in scale.reason


def test_no_loan_while_the_hpa_keeps_every_replica_or_frees_less_than_the_dead_band():
    # its metrics ask for all 8 (or more): the floor's loan frees nothing, so none is made and training is not grown
    for wants in (8, 12):
        scales, grown = plan(cluster(wants))
        assert scales == [] and grown == 0
    # 1 replica freed is below a dead band of 2: no loan either (before: 6 counted, past the band)
    scales, grown = plan(cluster(7), replace(POLICY, dead_band_replicas=2))
    assert scales == [] and grown == 0


def test_training_still_grows_onto_idle_gpus_beside_an_hpa_that_keeps_its_replicas():
    # 2 GPUs idle already: they go to training; the 6 the HPA keeps do not
    scales, grown = plan(cluster(8, free=2))
    assert scales == [] and grown == 2
