"""The pure tidal capacity planner: named cases, then hypothesis properties."""

from __future__ import annotations

from types import MappingProxyType

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.audit import reason_label
from balancer.model import Forecast, ScaleInference, ScaleTraining
from balancer.plan.capacity import (
    CapacityPolicy,
    CapacityState,
    CapacityView,
    JobView,
    ServiceCapacity,
    ServiceView,
)
from balancer.plan.capacity_plan import forecast_peak, plan_capacity, reclaim_horizon_s, replicas_for
from tests.capacity.settled_state import settled

STEP = 600.0
POLICY = CapacityPolicy(headroom=0.0, reclaim_headroom=0.0, dead_band_replicas=1, dead_band_frac=0.0, min_hold_s=1800.0)


def forecast(values, *, now=0.0, service="chat") -> Forecast:
    a = np.asarray(values, dtype=float)
    return Forecast(service=service, issued_at=now, step_s=STEP, quantiles={0.5: a, 0.9: a, 0.99: a})


def job(name, workers, *, gpus=None, prio=0, since=0.0, emin=1, emax=16, model="A100", restarts=False) -> JobView:
    placed = workers if gpus is None else gpus
    return JobView(name=name, workers=workers, elastic_min=emin, elastic_max=emax, priority=prio,
                   since_checkpoint_s=since, gpus_by_model=MappingProxyType({model: placed}),
                   restarts_on_resize=restarts)


def view(replicas, demand, *, free=0, jobs=(), now=0.0, min_replicas=1, home=0, warmup=300.0) -> CapacityView:
    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=warmup, min_replicas=min_replicas,
                           home_replicas=home)
    svc = ServiceView(profile=prof, demand_rps=demand, replicas=replicas,
                      gpus_by_model=MappingProxyType({"A100": replicas}))
    training = sum(sum(j.gpus_by_model.values()) for j in jobs)
    return CapacityView(time=now, free=MappingProxyType({"A100": free}), services=(svc,), jobs=tuple(jobs),
                        inference_gpus=replicas, training_gpus=training, total_gpus=replicas + training + free)


def inference_target(decision, default):
    return next((a.replicas for a in decision.actions if isinstance(a, ScaleInference)), default)


def training_sizes(decision):
    return {a.job: a.workers for a in decision.actions if isinstance(a, ScaleTraining)}


# ---- named cases ---------------------------------------------------------------------------------------------


def test_night_trough_loans_idle_inference_gpus_to_training():
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12)])
    d = plan_capacity(v, {"chat": forecast([30] * 24)}, POLICY, settled(v))
    assert inference_target(d, 10) == 3
    assert training_sizes(d) == {"train-a": 11}
    assert d.split.inference == 10 and d.targets["chat"] == 3
    assert {reason_label(a) for a in d.actions if isinstance(a, ScaleTraining)} == {"loan"}


def test_rise_within_the_warmup_lead_is_reclaimed_now_by_shrinking_training():
    # demand rises to 90 req/s 10 minutes from now; warm-up 300 s + margin 600 s covers it
    v = view(3, 30.0, jobs=[job("train-a", 10)])
    d = plan_capacity(v, {"chat": forecast([30, 90, 90, 90])}, POLICY, CapacityState())
    assert inference_target(d, 3) == 9
    assert training_sizes(d) == {"train-a": 4}
    assert {reason_label(a) for a in d.actions if isinstance(a, ScaleTraining)} == {"reclaim"}
    order = [a.kind for a in d.actions]
    assert order.index("scale_training") < order.index("scale_inference"), "free GPUs before scaling up"


def test_each_scale_up_follows_the_shrinks_that_free_its_gpus_so_an_action_cap_cuts_whole_units():
    services, jobs = [], []
    for model, name in (("A100", "chat"), ("H100", "code")):
        prof = ServiceCapacity(name=name, rps_per_replica=10.0, warmup_s=300.0, models=frozenset({model}))
        services.append(ServiceView(profile=prof, demand_rps=30.0, replicas=3,
                                    gpus_by_model=MappingProxyType({model: 3})))
        jobs += [job(f"train-{model}-{k}", 5, model=model) for k in "ab"]
    v = CapacityView(time=0.0, free=MappingProxyType({}), services=tuple(services), jobs=tuple(jobs),
                     inference_gpus=6, training_gpus=20, total_gpus=26)
    fcs = {name: forecast([30, 150, 150, 150], service=name) for name in ("chat", "code")}
    d = plan_capacity(v, fcs, POLICY, CapacityState())
    order = [(a.kind, a.target) for a in d.actions]   # a shrink may name a service too
    assert [k for k, _ in order].count("scale_inference") == 2
    for svc, model in (("chat", "A100"), ("code", "H100")):
        up = order.index(("scale_inference", svc))
        shrinks = [i for i, (k, t) in enumerate(order) if k == "scale_training" and model in t]
        assert shrinks and max(shrinks) < up, f"{svc}'s GPUs are freed right before its scale-up: {order}"
    # the first unit is complete before the second begins: a cap after it leaves no GPUs freed for nothing
    first_up = min(order.index(("scale_inference", s)) for s in ("chat", "code"))
    first_model = "A100" if order[first_up][1] == "chat" else "H100"
    assert all(first_model in t for k, t in order[:first_up])


def test_rise_beyond_the_lead_is_not_reclaimed_yet():
    v = view(3, 30.0, jobs=[job("train-a", 10)])
    d = plan_capacity(v, {"chat": forecast([30] * 6 + [90] * 6)}, POLICY, CapacityState())
    assert d.actions == ()


@pytest.mark.parametrize("warmup", [120.0, 300.0, 900.0], ids=["2-min warm-up", "5-min warm-up", "15-min warm-up"])
def test_replicas_are_reclaimed_at_least_the_warmup_lead_before_the_rise(warmup):
    rise_at = 4 * 3600.0
    truth = lambda t: 90.0 if t >= rise_at else 30.0  # noqa: E731
    replicas, state, ready_at = 3, CapacityState(), None
    for t in np.arange(0.0, rise_at + 1, 60.0):
        fc = forecast([truth(t + STEP * (k + 1) - 1) for k in range(24)], now=t)
        v = view(replicas, truth(t), jobs=[job("train-a", 20, emax=40)], now=float(t), warmup=warmup, free=0)
        d = plan_capacity(v, {"chat": fc}, POLICY, state)
        state = d.state
        new = inference_target(d, replicas)
        if new >= 9 and ready_at is None:
            ready_at = t
        replicas = new
    assert ready_at is not None and ready_at <= rise_at - warmup


def test_flapping_demand_causes_no_flapping_actions():
    wave = [30, 90] * 12  # a 20-minute oscillation, well inside the loan horizon
    replicas, state, changes = 9, CapacityState(), []
    for i, t in enumerate(np.arange(0.0, 6 * 3600, 60.0)):
        shift = (i * 60 // int(STEP)) % 2
        fc = forecast(wave[shift:shift + 20], now=float(t))
        d = plan_capacity(view(replicas, wave[shift], jobs=[job("train-a", 4)], now=float(t)), {"chat": fc},
                          POLICY, state)
        state = d.state
        new = inference_target(d, replicas)
        if new != replicas:
            changes.append(new - replicas)
        replicas = new
    assert changes == [], "the 90 req/s peaks inside the loan horizon keep 9 replicas"


def test_scale_down_waits_for_the_minimum_hold_time_and_the_dead_band():
    policy = CapacityPolicy(headroom=0.0, reclaim_headroom=0.0, dead_band_replicas=2, dead_band_frac=0.0,
                            min_hold_s=1800.0)
    fc = forecast([30] * 24, now=1000.0)
    recent = CapacityState(MappingProxyType({"chat": 0.0}), MappingProxyType({"chat": (940.0, 30.0, 0.0)}))
    assert plan_capacity(view(10, 30.0, now=1000.0), {"chat": fc}, policy, recent).actions == ()
    within_band = plan_capacity(view(4, 30.0, now=5000.0), {"chat": forecast([30] * 24, now=5000.0)}, policy, recent)
    assert within_band.actions == (), "shedding one replica is inside the dead band of two"
    later = plan_capacity(view(10, 30.0, now=5000.0), {"chat": forecast([30] * 24, now=5000.0)}, policy, recent)
    assert inference_target(later, 10) == 3


@pytest.mark.parametrize(("demand", "min_replicas", "expected"), [
    (0.0, 2, 2),
    (5.0, 3, 3),
    (55.0, 2, 6),
], ids=["idle service keeps its minimum", "light load keeps its minimum", "load above the minimum"])
def test_min_replicas_are_respected(demand, min_replicas, expected):
    v = view(8, demand, min_replicas=min_replicas, jobs=[job("train-a", 2)])
    d = plan_capacity(v, {"chat": forecast([demand] * 24)}, POLICY, settled(v))
    assert inference_target(d, 8) == expected


@pytest.mark.parametrize(("jobs", "shrunk"), [
    ([job("fresh", 6, since=60.0), job("stale", 6, since=1700.0)], {"fresh": 3}),
    ([job("stale-low", 6, since=1700.0, prio=0), job("fresh-high", 6, since=10.0, prio=5)], {"stale-low": 3}),
    ([job("small", 3, emin=2, since=0.0), job("big", 6, emin=1, since=900.0)], {"small": 2, "big": 4}),
    ([job("a", 2, emin=2, since=0.0), job("b", 2, emin=2, since=600.0)], {"a": 0, "b": 1}),
], ids=["least work since checkpoint goes first", "lower priority goes first even if it loses more",
        "elastic minimum bounds each job before moving on", "suspends the cheapest when minimums are not enough"])
def test_chooses_the_cheapest_training_to_preempt(jobs, shrunk):
    v = view(3, 30.0, jobs=jobs)
    d = plan_capacity(v, {"chat": forecast([60] * 24)}, POLICY, CapacityState())
    assert inference_target(d, 3) == 6
    assert training_sizes(d) == shrunk


def test_a_job_kueue_restarts_to_resize_is_shrunk_after_one_resized_in_place_at_the_same_cost():
    # a Kueue-queued Job without kueue.x-k8s.io/elastic-job is suspended, re-queued and re-admitted whole when its
    # size changes: at one priority and one loss since checkpoint, the job resized in place gives the GPUs
    jobs = [job("a-queued", 6, restarts=True), job("b-elastic", 6)]
    d = plan_capacity(view(3, 30.0, jobs=jobs), {"chat": forecast([60] * 24)}, POLICY, CapacityState())
    assert training_sizes(d) == {"b-elastic": 3}
    # a lower priority still goes first, restart or not (the cost model's first key)
    jobs = [job("a-queued", 6, restarts=True), job("b-elastic", 6, prio=5)]
    d = plan_capacity(view(3, 30.0, jobs=jobs), {"chat": forecast([60] * 24)}, POLICY, CapacityState())
    assert training_sizes(d) == {"a-queued": 3}
    shrink = next(a for a in d.actions if isinstance(a, ScaleTraining))
    assert "restarts the whole job" in shrink.reason


def test_a_grow_that_restarts_the_job_is_proposed_only_when_it_adds_more_than_the_restart_loses():
    # 7 idle GPUs for 2 h add 14 GPU-h; a restart of 4 GPUs 14 h past their checkpoint loses 56 GPU-h
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12, since=14 * 3600.0, restarts=True)])
    d = plan_capacity(v, {"chat": forecast([30] * 24)}, POLICY, settled(v))
    assert inference_target(d, 10) == 3
    assert training_sizes(d) == {}
    # 30 min past the checkpoint it loses 2 GPU-h, and the loan's reclaim 30 min of its 11 GPUs (5.5): grown, and
    # its gain is what is left of the 14
    v = view(10, 20.0, jobs=[job("train-a", 4, emax=12, since=1800.0, restarts=True)])
    d = plan_capacity(v, {"chat": forecast([30] * 24)}, POLICY, settled(v))
    grow = next(a for a in d.actions if isinstance(a, ScaleTraining))
    assert (grow.workers, grow.expected_gain) == (11, pytest.approx(6.5))
    assert "loses 2.00 GPU-h since checkpoint" in grow.reason and "restarts the whole job" in grow.reason


def test_idle_gpus_grow_a_job_resized_in_place_before_one_a_resize_restarts():
    jobs = [job("a-queued", 4, emax=12, restarts=True), job("b-elastic", 4, emax=12)]
    v = view(10, 20.0, jobs=jobs)
    d = plan_capacity(v, {"chat": forecast([30] * 24)}, POLICY, settled(v))
    assert training_sizes(d) == {"b-elastic": 11}


def test_missing_forecast_holds_or_follows_current_demand():
    d = plan_capacity(view(3, 80.0, free=10), {}, POLICY, CapacityState())
    assert inference_target(d, 3) == 8
    d = plan_capacity(view(9, 10.0, free=10), {}, POLICY, CapacityState())
    assert inference_target(d, 9) == 9


def test_split_counts_loaned_gpus_against_the_home_allotment():
    v = view(4, 30.0, home=10, jobs=[job("train-a", 12)])
    d = plan_capacity(v, {"chat": forecast([30] * 24)}, POLICY, CapacityState())
    assert d.split.as_dict() == {"inference": 4, "training": 12, "loaned": 6, "idle": 0}


# ---- properties ----------------------------------------------------------------------------------------------


@st.composite
def scenarios(draw):
    replicas = draw(st.integers(1, 30))
    demand = draw(st.floats(0.0, 300.0))
    fc = draw(st.lists(st.floats(0.0, 300.0), min_size=1, max_size=24))
    jobs = [job(f"j{i}", w, emin=draw(st.integers(0, 3)), emax=w + draw(st.integers(0, 10)),
                since=draw(st.floats(0, 3600)), prio=draw(st.integers(0, 3)))
            for i, w in enumerate(draw(st.lists(st.integers(0, 12), max_size=4)))]
    free = draw(st.integers(0, 20))
    now = draw(st.floats(0.0, 1e5))
    last = draw(st.none() | st.floats(0.0, 1e5))
    state = CapacityState(MappingProxyType({} if last is None else {"chat": min(last, now)}))
    return view(replicas, demand, free=free, jobs=jobs, now=now, min_replicas=draw(st.integers(0, 3))), \
        forecast(fc, now=now), state


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_never_below_what_the_p90_needs_at_the_reclaim_horizon_when_gpus_exist(case):
    v, fc, state = case
    d = plan_capacity(v, {"chat": fc}, POLICY, state)
    s = v.services[0]
    need = max(replicas_for(forecast_peak(fc, 0.9, v.time, reclaim_horizon_s(s.profile, POLICY)), s.profile, 0.0),
               replicas_for(s.demand_rps, s.profile, 0.0))
    new = inference_target(d, s.replicas)
    available = s.replicas + v.free["A100"] + v.training_gpus
    assert new >= min(need, available)
    if new < need:
        assert d.notes, "a shortfall is reported"


@settings(max_examples=150, deadline=None)
@given(scenarios())
def test_total_gpus_are_conserved_and_bounds_hold(case):
    v, fc, state = case
    d = plan_capacity(v, {"chat": fc}, POLICY, state)
    s = v.services[0]
    new_inf = inference_target(d, s.replicas)
    sizes = {j.name: j.workers for j in v.jobs} | training_sizes(d)
    assert new_inf >= min(s.profile.min_replicas, s.replicas + v.free["A100"] + v.training_gpus)
    for j in v.jobs:
        assert 0 <= sizes[j.name] <= max(j.elastic_max, j.workers)
        if sizes[j.name] < j.workers:
            assert new_inf > s.replicas, "training only shrinks to make room for inference"
    # GPUs in use after the plan never exceed the healthy GPUs of the fleet
    placed_training = sum(min(sizes[j.name], j.placed_workers) if sizes[j.name] <= j.workers else sizes[j.name]
                          for j in v.jobs)
    assert new_inf + placed_training <= v.total_gpus
    assert d.split.inference + d.split.training + d.split.idle == v.total_gpus
