"""The static and reactive (HPA-like) baselines behave as specified."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest

from balancer.plan.baselines import (
    ReactivePolicy,
    ReactiveState,
    hpa_recommendation,
    plan_reactive,
    plan_static,
    scaled_services,
)
from balancer.plan.capacity import CapacityView, JobView, ServiceCapacity, ServiceView

HPA = ReactivePolicy(target_utilisation=0.5, tolerance=0.1, stabilisation_s=300.0)


def view(replicas, demand, *, now=0.0, home=8, free=0, workers=6) -> CapacityView:
    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, min_replicas=1, home_replicas=home)
    svc = ServiceView(profile=prof, demand_rps=demand, replicas=replicas,
                      gpus_by_model=MappingProxyType({"A100": replicas}))
    j = JobView(name="train", workers=workers, elastic_min=1, elastic_max=32,
                gpus_by_model=MappingProxyType({"A100": workers}))
    return CapacityView(time=now, free=MappingProxyType({"A100": free}), services=(svc,), jobs=(j,),
                        inference_gpus=replicas, training_gpus=workers, total_gpus=replicas + workers + free)


@pytest.mark.parametrize(("replicas", "demand", "free", "expected_inf", "expected_train"), [
    (8, 5.0, 4, None, 10),
    (3, 5.0, 0, 8, 1),
    (12, 90.0, 0, 8, 10),
], ids=["at its peak allotment it only hands idle GPUs to training",
        "below its allotment it takes GPUs back whatever the demand",
        "above its allotment it returns to it even under load"])
def test_static_holds_the_peak_allotment_whatever_the_demand(replicas, demand, free, expected_inf, expected_train):
    d = plan_static(view(replicas, demand, free=free))
    assert scaled_services(d).get("chat") == expected_inf
    sizes = {a.job: a.workers for a in d.actions if a.kind == "scale_training"}
    assert sizes.get("train") == expected_train


@pytest.mark.parametrize(("demand", "replicas", "expected"), [
    (50.0, 10, 10),
    (52.0, 10, 10),
    (60.0, 10, 12),
    (20.0, 10, 4),
    (0.0, 0, 0),
    (7.0, 0, 2),
], ids=["at target", "inside the 10% tolerance", "above target", "below target", "idle with no replicas",
        "demand with no replicas"])
def test_hpa_recommendation_follows_the_hpa_formula(demand, replicas, expected):
    assert hpa_recommendation(demand, replicas, 10.0, HPA) == expected


def test_reactive_scales_up_at_once():
    d, _ = plan_reactive(view(4, 60.0, free=8), HPA, ReactiveState())
    assert scaled_services(d) == {"chat": 12}


def test_reactive_scale_down_waits_for_the_stabilisation_window():
    replicas, state, applied = 12, ReactiveState(), []
    for t in np.arange(0.0, 900.0, 60.0):
        demand = 60.0 if t < 120 else 20.0
        d, state = plan_reactive(view(replicas, demand, now=float(t)), HPA, state)
        new = scaled_services(d).get("chat", replicas)
        if new != replicas:
            applied.append((float(t), new))
        replicas = new
    # the last high recommendation (12) was at t=60; the window drops it only after t >= 360
    assert applied == [(360.0, 4)]


def test_reactive_loans_what_it_frees_and_reclaims_by_preempting_training():
    d, _ = plan_reactive(view(12, 20.0, now=0.0), HPA, ReactiveState(MappingProxyType({"chat": ((-400.0, 12),)})))
    assert scaled_services(d) == {"chat": 4}
    assert {a.job: a.workers for a in d.actions if a.kind == "scale_training"} == {"train": 14}
    d, _ = plan_reactive(view(4, 60.0, workers=14), HPA, ReactiveState())
    assert {a.job: a.workers for a in d.actions if a.kind == "scale_training"} == {"train": 6}


def test_reactive_ignores_the_forecast_entirely():
    # a rise is coming but the current utilisation is at target: the HPA does nothing
    d, _ = plan_reactive(view(10, 50.0), HPA, ReactiveState())
    assert d.actions == ()
