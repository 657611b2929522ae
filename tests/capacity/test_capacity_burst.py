"""The capacity planner's defences against what the forecast misses, and the policy file's `capacity` section.

Burst floor (`rise_allowance`, `ServiceView.burst`), ramp projection, surge response, the latency safety net, no loans
while demand rises, suspended jobs growing back, and `CapacityPolicy.from_config` end to end through `gputide simulate`.
"""

from __future__ import annotations

import json
from dataclasses import replace
from types import MappingProxyType

import numpy as np
import pytest
import yaml

from balancer import cli, config
from balancer.model import Forecast, ScaleInference, ScaleTraining
from balancer.plan.capacity import (
    CapacityPolicy,
    CapacityState,
    CapacityView,
    JobView,
    ServiceCapacity,
    ServiceView,
)
from balancer.plan.capacity_plan import plan_capacity, replicas_for, rise_allowance, surge_rps
from tests.capacity.settled_state import settled

LEAD = 360.0
POLICY = CapacityPolicy(headroom=0.0, reclaim_headroom=0.0, dead_band_frac=0.0, min_hold_s=0.0)
PROFILE = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0)


def minutes(values):
    return np.arange(len(values)) * 60.0, np.asarray(values, dtype=float)


@pytest.mark.parametrize(("values", "expected"), [
    ([100.0] * 30, 0.0),
    ([100.0] * 10 + [150.0] * 20, 0.5),
    ([100.0 + 10 * k for k in range(30)], 60 / 100),
    ([100.0] * 10 + [80.0] * 20, 0.0),
    ([1.0] * 29 + [2000.0], 3.0),
], ids=["flat demand has no burst", "a 50% step is a 50% burst", "a ramp counts its rise within the lead only",
        "a fall is no burst", "the allowance is capped"])
def test_rise_allowance_is_the_largest_rise_within_the_lead(values, expected):
    t, y = minutes(values)
    assert rise_allowance(t, y, LEAD, cap=3.0) == pytest.approx(expected, rel=0.02)


def test_rise_allowance_measures_quiet_levels_against_a_floor_of_the_mean():
    t, y = minutes([100.0] * 20 + [1.0] * 10 + [2.0] * 10)  # a busy day, then a night doubling from 1 req/s
    assert rise_allowance(t, y, LEAD, cap=3.0) == pytest.approx(1.0 / (0.05 * y.mean()))
    assert rise_allowance(t[20:], y[20:], LEAD, cap=3.0) == pytest.approx(1.0), "a doubling when all is quiet"


def svc(replicas, demand, *, burst=0.0, pressure=0.0):
    return ServiceView(profile=PROFILE, demand_rps=demand, replicas=replicas, burst=burst,
                       latency_pressure=pressure, gpus_by_model=MappingProxyType({"A100": replicas}))


def cview(service, *, now=0.0, free=40, jobs=()):
    training = sum(sum(j.gpus_by_model.values()) for j in jobs)
    return CapacityView(time=now, free=MappingProxyType({"A100": free}), services=(service,), jobs=tuple(jobs),
                        inference_gpus=service.replicas, training_gpus=training,
                        total_gpus=service.replicas + training + free)


def flat(level, now=0.0):
    a = np.full(24, float(level))
    return {"chat": Forecast(service="chat", issued_at=now, step_s=600.0, quantiles={0.5: a, 0.9: a, 0.99: a})}


def target(decision, default):
    return next((a.replicas for a in decision.actions if isinstance(a, ScaleInference)), default)


@pytest.mark.parametrize(("burst", "expected"), [(0.0, 5), (0.5, 8), (1.0, 10)],
                         ids=["no burst seen: the forecast decides", "50% bursts seen: 50% spare",
                              "doubling seen: twice the demand"])
def test_burst_floor_holds_spare_replicas_the_forecast_would_loan(burst, expected):
    v = cview(svc(12, 50.0, burst=burst))
    d = plan_capacity(v, flat(50.0), POLICY, settled(v))
    assert target(d, 12) == expected


def test_latency_pressure_grows_the_service_at_once_then_waits_for_the_warm_up():
    pol = replace(POLICY, emergency_pressure=0.5, emergency_step=0.25)
    d = plan_capacity(cview(svc(8, 50.0, pressure=0.7)), flat(50.0), pol, CapacityState())
    assert target(d, 8) == 10, "p99 at 70% of the SLO: +25% now, whatever the forecast says"
    again = plan_capacity(cview(svc(10, 50.0, pressure=0.7), now=60.0), flat(50.0, 60.0), pol, d.state)
    assert target(again, 10) == 10, "the replicas just added are still warming: no second step yet"
    calm = plan_capacity(cview(svc(8, 50.0, pressure=0.3)), flat(50.0), pol, CapacityState())
    assert target(calm, 8) <= 8


def run_demand(demands, replicas=12):
    state, out = CapacityState(), []
    for k, dem in enumerate(demands):
        d = plan_capacity(cview(svc(replicas, dem), now=60.0 * k), flat(30.0, 60.0 * k), POLICY, state)
        state, replicas = d.state, target(d, replicas)
        out.append(replicas)
    return out


def test_ramp_of_two_rises_is_met_ahead_and_a_step_that_stopped_rising_is_met_at_its_level():
    ramp = run_demand([60.0, 65.0, 70.0])
    assert ramp[-1] >= replicas_for(70.0 + 5 / 60 * 360, PROFILE, 0.0), "+5 req/s a minute, 6 min ahead"
    step = run_demand([60.0, 90.0, 90.0])
    assert step[-1] == replicas_for(90.0, PROFILE, 0.0), (
        "a step that stopped rising is met at its level, not projected as a ramp")


def surge_run(demands, *, replicas=4, burst=0.0, home=0, expected=30.0, policy=POLICY):
    """(time, new target) of every scale the planner orders over one demand per 60 s cycle."""
    prof = replace(PROFILE, home_replicas=home)
    state, changes = CapacityState(), []
    for k, dem in enumerate(demands):
        s = replace(svc(replicas, dem, burst=burst), profile=prof)
        d = plan_capacity(cview(s, now=60.0 * k), flat(expected, 60.0 * k), policy, state)
        state, new = d.state, target(d, replicas)
        if new != replicas:
            changes.append((60.0 * k, new))
        replicas = new
    return changes


@pytest.mark.parametrize(("burst", "home", "demands", "expected"), [
    (0.0, 0, [60.0, 65.0], 15),
    (0.5, 0, [60.0, 65.0], 15),
    (2.0, 0, [60.0, 80.0], 24),
    (0.0, 0, [20.0, 60.0], 18),
    (0.0, 12, [60.0, 80.0], 13),
], ids=["+5 req/s in a minute is 65 + 5 x 16 min ahead (warm-up, margin, one cycle) at once",
        "a 50% burst floor is passed: the projection",
        "a 200% burst floor covers it: the floor, no projection", "capped at the level correction (3 x now)",
        "capped at the static allotment and its 5 % margin (12 x 1.05, rounded up)"])
def test_a_rise_steeper_than_the_burst_floor_gets_its_projection_in_one_cycle(burst, home, demands, expected):
    changes = surge_run(demands, burst=burst, home=home)
    assert changes[-1] == (60.0 * (len(demands) - 1), expected)


@pytest.mark.parametrize(("margin", "demand", "home", "expected"), [
    (0.0, 150.0, 20, 20), (0.05, 150.0, 20, 21), (0.2, 150.0, 20, 24), (0.05, 230.0, 20, 23), (0.1, 400.0, 50, 55),
], ids=["no margin: the home allotment", "5 %: one more (20 x 1.05)", "20 %: four more",
        "demand beyond the home allotment is followed, margin or not",
        "50 x 1.1 is 55, though 55.000000000000007 in floating point"])
def test_the_spare_rules_hold_at_most_the_home_allotment_and_its_margin(margin, demand, home, expected):
    # a 100 % burst floor on 150 req/s asks for 30 replicas; static holds 20 (the home allotment). Past it, the
    # margin is what lets gputide beat static at the peak, where static's SLO misses are, to pay back the night's
    assert surge_run([demand], replicas=18, burst=1.0, home=home, policy=replace(POLICY, home_margin=margin)) == (
        [(0.0, expected)])


@pytest.mark.parametrize(("demand", "slope", "burst", "expected_rps"), [
    (80.0, 0.0, 0.0, 30.0), (80.0, -0.5, 0.0, 30.0), (80.0, 0.1, 0.5, 30.0), (80.0, 0.5, 0.0, 100.0),
], ids=["flat demand", "falling demand", "a rise within the burst floor", "a rise the forecast foresaw"])
def test_no_surge_where_the_burst_floor_or_the_forecast_covers_the_demand(demand, slope, burst, expected_rps):
    assert surge_rps(demand, slope, 360.0, burst, 3.0, expected_rps) == 0.0


def test_a_rise_the_forecast_foresaw_is_met_by_the_forecast_not_projected():
    assert surge_run([60.0, 80.0], expected=100.0) == [(0.0, 10)], "the p90 of 100 req/s: 10 replicas, no more"


def test_a_one_cycle_spike_that_reverses_scales_up_once_then_down_only_after_the_hold_time():
    held = replace(POLICY, min_hold_s=1800.0)
    changes = surge_run([40.0, 80.0] + [40.0] * 40, policy=held)
    assert changes == [(60.0, 24), (60.0 + 1800.0, 4)], "up at once, held for min_hold_s, then one scale-down"


@pytest.mark.parametrize(("before", "loans"), [(41.0, True), (40.0, True), (39.0, False)],
                         ids=["falling demand may be loaned", "flat demand may be loaned",
                              "rising demand is never loaned, whatever the forecast"])
def test_no_loans_while_demand_rises(before, loans):
    state = CapacityState(last_demand=MappingProxyType({"chat": (-60.0, before, 0.0)}))
    d = plan_capacity(cview(svc(12, 40.0)), flat(30.0), POLICY, state)
    assert (target(d, 12) < 12) is loans


def test_suspended_job_grows_back_on_idle_gpus():
    gone = JobView(name="train-a", workers=0, elastic_max=8)
    d = plan_capacity(cview(svc(5, 50.0), free=6, jobs=[gone]), flat(50.0), POLICY, CapacityState())
    grown = [a for a in d.actions if isinstance(a, ScaleTraining)]
    assert [(a.job, a.workers) for a in grown] == [("train-a", 6)]


# ---- the policy file's capacity section ---------------------------------------------------------------------


@pytest.mark.parametrize(("spec", "expected"), [
    ({}, CapacityPolicy()),
    ({"headroom": 0.5}, replace(CapacityPolicy(), headroom=0.5)),
    ({"headroom": 0.5, "enabled": True}, replace(CapacityPolicy(), headroom=0.5)),
    ({"reclaimQuantile": 0.99, "keepQuantile": 0.99}, replace(CapacityPolicy(), reclaim_quantile=0.99,
                                                              keep_quantile=0.99)),
    ({"homeMargin": 0}, replace(CapacityPolicy(), home_margin=0.0)),
], ids=["defaults keep the planner's defaults", "a shared field is read", "fields the planner lacks are ignored",
        "the SLO-first quantiles are read", "no margin above the home allotment"])
def test_capacity_policy_reads_the_fields_it_shares_with_the_policy_file(spec, expected):
    doc = {"apiVersion": config.API_VERSION, "kind": config.KIND, "spec": {"capacity": spec}}
    assert CapacityPolicy.from_config(config.from_dict(doc).capacity) == expected


def test_the_policy_files_quantile_defaults_are_the_planners():
    # from_config keeps the planner's value where the file leaves its own default: were the two defaults apart, a
    # file that set the file's default explicitly would get the planner's instead
    section = config.from_dict({"apiVersion": config.API_VERSION, "kind": config.KIND, "spec": {}}).capacity
    assert (section.reclaim_quantile, section.keep_quantile) == (CapacityPolicy().reclaim_quantile,
                                                                 CapacityPolicy().keep_quantile) == (0.9, 0.9)
    assert section.home_margin == CapacityPolicy().home_margin == 0.05


def test_policy_file_changes_capacity_behaviour_in_gputide_simulate(tmp_path, capsys):
    runs = {}
    for name, headroom in (("default", None), ("roomy", 2.0)):
        args = ["simulate", "--scenario", "tidal", "--policy", "gputide", "--days", "0.1", "--no-plots",
                "--print", "json", "--out", str(tmp_path / name)]
        if headroom is not None:
            doc = {"apiVersion": config.API_VERSION, "kind": config.KIND,
                   "spec": {"capacity": {"headroom": headroom}}}
            (tmp_path / "policy.yaml").write_text(yaml.safe_dump(doc))
            args += ["--policy-file", str(tmp_path / "policy.yaml")]
        assert cli.main(args) == 0
        capsys.readouterr()
        runs[name] = json.loads((tmp_path / name / "summary.json").read_text())
    assert runs["roomy"]["inference"]["gpu_hours"] > 1.1 * runs["default"]["inference"]["gpu_hours"]
    assert runs["roomy"]["training"]["progress"] < runs["default"]["training"]["progress"]
