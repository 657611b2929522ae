"""Tidal capacity shifting inside the reconcile loop (`gputide run` with capacity.enabled): every decision goes
through the safety guard, the hotspot plan and the tide never fight over a job, and the live controller loans at
night and reclaims ahead of the morning rise on the simulated tidal fleet."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from balancer import config
from balancer.actuate.sim import SimActuator
from balancer.app import scenarios, tidal
from balancer.app.capacity_run import CapacityLoopPlanner
from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Plan, ScaleInference, ScaleTraining
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, view_from_snapshot
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.telemetry.sim import SimTelemetrySource
from tests.capacity.settled_state import settled

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))


@pytest.fixture(scope="module")
def tide():
    sim, _events, _days = scenarios.build("tidal", days=1)
    return sim, tidal.context(sim)


def base_with(*actions):
    def base(snapshot, forecasts, policy, state):
        return Plan(actions=tuple(actions)), state or planner_mod.PlannerState()
    return base


def loan_forecast(tc, now, level=0.2):
    """A forecast of very low demand for every service: the capacity plan wants to loan."""
    from balancer.model import Forecast

    return {name: Forecast(service=name, issued_at=now, step_s=600.0,
                           quantiles={q: np.full(24, level) for q in (0.5, 0.9, 0.99)}) for name in tc.shares}


def settled_state(sim, tc):
    """A planner state that has watched every service long enough to loan (a fresh one holds loans a while)."""
    view = view_from_snapshot(sim.snapshot(), tc.profiles)
    return planner_mod.PlannerState(capacity=settled(view))


def run_plan(sim, tc, base, state=None, policy=ON):
    snap = sim.snapshot()
    state = settled_state(sim, tc) if state is None else state
    return plan_with_capacity(snap, loan_forecast(tc, snap.time), policy, state, profiles=tc.profiles,
                              capacity_policy=CapacityPolicy(min_hold_s=0.0), base=base)


def test_disabled_capacity_returns_the_hotspot_plan_untouched(tide):
    sim, tc = tide
    off = config.BalancerPolicy()
    plan, state = run_plan(sim, tc, base_with(), planner_mod.PlannerState(), policy=off)
    assert plan.actions == () and state.capacity is None and state.capacity_targets is None


def test_enabled_capacity_appends_its_loans_and_keeps_its_memory(tide):
    sim, tc = tide
    plan, state = run_plan(sim, tc, base_with())
    loans = [a for a in plan.actions if isinstance(a, ScaleInference) and a.replicas < a.previous_replicas]
    assert loans, "a near-zero forecast must loan inference GPUs"
    assert state.capacity is not None and state.loaned_gpus >= 0 and set(state.capacity_targets) == set(tc.shares)


def test_the_tide_leaves_a_service_the_hotspot_plan_already_acts_on_and_goes_ahead_with_the_rest(tide):
    sim, tc = tide
    service = sorted(tc.shares)[0]
    hot = ScaleInference(service=service, replicas=99, previous_replicas=1, reason="hotspot", expected_gain=1.0)
    plan, state = run_plan(sim, tc, base_with(hot))
    assert plan.actions[0] == hot and not [a for a in plan.actions[1:] if a.target == service]
    assert [a for a in plan.actions[1:] if isinstance(a, ScaleInference)], "the other services still loan"
    assert any("capacity leaves" in n and service in n for n in plan.notes)
    before = settled_state(sim, tc).capacity  # the change that did not happen is not kept
    assert state.capacity.last_change[service] == before.last_change[service]
    assert state.capacity.last_demand[service] == before.last_demand[service]


def test_a_hotspot_give_back_never_grows_a_job_the_tide_sizes(tide):
    sim, tc = tide
    job = sorted(sim.training_jobs)[0]
    workers = sum(1 for w in sim.snapshot().workloads if w.owner == job)
    give_back = ScaleTraining(job=job, workers=workers + 4, previous_workers=workers, reason="hotspot cleared",
                              expected_gain=5.0)
    state = replace(planner_mod.PlannerState(), shrunk={job: workers + 4})
    plan, new_state = run_plan(sim, tc, base_with(give_back), state=state)
    assert give_back not in plan.actions
    assert job not in new_state.shrunk


def test_capacity_holds_while_the_services_pods_have_no_owners_but_not_for_a_stray_bare_pod(tide):
    sim, tc = tide
    snap = sim.snapshot()
    service = sorted(tc.shares)[0]

    def plan_for(snapshot, full=False):
        out = plan_with_capacity(snapshot, loan_forecast(tc, snapshot.time), ON, settled_state(sim, tc),
                                 profiles=tc.profiles,
                                 capacity_policy=CapacityPolicy(min_hold_s=0.0), base=base_with())
        return out if full else out[0]

    # the API has not answered yet: no pod has an owner, every service looks empty
    blind = replace(snap, workloads=tuple(replace(w, owner="") for w in snap.workloads))
    plan, state = plan_for(blind, full=True)
    assert plan.actions == () and any("capacity holds" in n and service in n for n in plan.notes)
    metrics = ControllerMetrics(CollectorRegistry())
    metrics.set_capacity_holding(state.capacity_holding)  # what the loop does with it each cycle
    assert metrics.registry.get_sample_value("gputide_capacity_holding", {"reason": "unattributed_pods"}) == 1
    assert plan_for(snap, full=True)[1].capacity_holding == frozenset()  # owners known: it plans, and the gauge clears
    metrics.set_capacity_holding(())
    assert metrics.registry.get_sample_value("gputide_capacity_holding", {"reason": "unattributed_pods"}) is None
    # one service's pods unattributed: still no capacity action (it would be "reclaimed" for from scratch)
    partly = replace(snap, workloads=tuple(replace(w, owner="") if w.owner == service else w for w in snap.workloads))
    assert plan_for(partly).actions == ()
    # a bare inference pod of nobody's: the services still own theirs, the tide goes on
    stray = next(w for w in snap.workloads if w.owner == service)
    bare = replace(stray, name="ml/bare-pod", owner="")
    with_stray = replace(snap, workloads=(*snap.workloads, bare),
                         placements={**snap.placements, bare.name: snap.placements[stray.name]})
    assert plan_for(with_stray).actions, "a stray pod must not stop capacity shifting"


def test_pending_replicas_do_not_count_as_capacity(tide):
    sim, tc = tide
    service = sorted(tc.shares)[0]
    snap = sim.snapshot()
    placed = {s.profile.name: s.replicas for s in view_from_snapshot(snap, tc.profiles).services}
    status = snap.services[service]
    pending = replace(snap, services={**snap.services, service: replace(status, replicas=status.replicas + 7)})
    seen = {s.profile.name: s.replicas for s in view_from_snapshot(pending, tc.profiles).services}
    assert seen[service] == placed[service]


def test_the_live_loop_loans_at_night_and_reclaims_ahead_of_the_day_within_the_slo():
    """Nine simulated hours from midnight of the trace's last day, one cycle a minute, through the real guard."""
    sim, _events, _days = scenarios.build("tidal", days=1)
    tc = tidal.context(sim)

    def history(name, now):
        h = tc.history * tc.shares[name]
        return h[h.index.as_unit("s").asi8 < now]

    policy = replace(ON, forecast=config.ForecastPolicy(step_s=600.0))
    cap = CapacityPolicy.from_config(policy.capacity, tidal.CAPACITY)
    rec = Reconciler(source=SimTelemetrySource(sim), actuator=SimActuator(sim), policy=policy, clock=lambda: sim.time,
                     forecaster=ServiceForecaster(DemandForecaster(model="profile", step_s=600.0), 3 * 3600.0,
                                                  history=history),
                     planner=CapacityLoopPlanner(tc.profiles, cap, 60.0, history=history),
                     metrics=ControllerMetrics(CollectorRegistry()))
    loaned, applied, worst_p99 = [], [], 0.0
    for _ in range(9 * 60):
        report = rec.run_once()
        assert report.status == "ok", report.reason
        applied += [r.action for r in report.results if str(r.outcome) == "applied"]
        loaned.append(rec.state.loaned_gpus)
        sim.step()
        worst_p99 = max(worst_p99, max(s.p99_latency_s / s.slo_latency_s for s in sim.service_status().values()))
    summary = sim.acct.summary(sim)["inference"]
    violating = sum(s["slo_violations"] for s in summary.values()) / sum(s["requests"] for s in summary.values())
    assert max(loaned) >= 40, "the night's idle inference GPUs must go to training"
    peak = int(np.argmax(loaned))
    assert min(loaned[peak:]) <= loaned[peak] - 20, "GPUs must come back to inference as the demand rises"
    assert any(isinstance(a, ScaleTraining) and a.reclaim for a in applied), "reclaims shrink training"
    assert violating < 1e-4 and worst_p99 < 1.0, (violating, worst_p99)


def _pending_view(asked, placed, demand, free=0):
    from types import MappingProxyType

    from balancer.plan.capacity import CapacityView, JobView, ServiceCapacity, ServiceView

    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0, home_replicas=12)
    svc = ServiceView(profile=prof, demand_rps=demand, replicas=placed, desired=asked,
                      gpus_by_model=MappingProxyType({"A100": placed}))
    job = JobView(name="train", workers=8, elastic_min=1, elastic_max=16, gpus_by_model=MappingProxyType({"A100": 8}))
    return CapacityView(time=10_000.0, free=MappingProxyType({"A100": free}), services=(svc,), jobs=(job,),
                        inference_gpus=placed, training_gpus=8, total_gpus=placed + 8 + free)


def _flat(level):
    from balancer.model import Forecast

    return {"chat": Forecast(service="chat", issued_at=10_000.0, step_s=600.0,
                             quantiles={q: np.full(24, level) for q in (0.5, 0.9, 0.99)})}


def test_pending_replicas_the_forecast_needs_get_gpus_from_training_without_a_second_request():
    from balancer.plan.capacity import CapacityPolicy as PlannerPolicy
    from balancer.plan.capacity import CapacityState
    from balancer.plan.capacity_plan import plan_capacity

    d = plan_capacity(_pending_view(asked=8, placed=5, demand=60.0), _flat(60.0), PlannerPolicy(), CapacityState())
    shrinks = [a for a in d.actions if isinstance(a, ScaleTraining)]
    assert shrinks and all(a.reclaim and a.workers < 8 for a in shrinks)
    assert not [a for a in d.actions if isinstance(a, ScaleInference) and a.replicas <= 8]  # 8 already asked


def test_pending_replicas_the_forecast_does_not_need_take_no_gpu_from_training():
    from balancer.plan.capacity import CapacityPolicy as PlannerPolicy
    from balancer.plan.capacity import CapacityState
    from balancer.plan.capacity_plan import plan_capacity

    d = plan_capacity(_pending_view(asked=8, placed=5, demand=20.0), _flat(20.0),
                      PlannerPolicy(min_hold_s=1e9), CapacityState())
    assert not [a for a in d.actions if isinstance(a, ScaleTraining) and a.workers < a.previous_workers]


def test_jobs_are_suspended_only_when_the_snapshot_can_list_suspended_jobs(tide):
    sim, tc = tide
    snap = sim.snapshot()
    # demand now far above the peak: every service wants every GPU of its pool, at once
    snap = replace(snap, services={k: replace(v, demand_rps=1e6) for k, v in snap.services.items()})
    flood = loan_forecast(tc, snap.time, level=1e6)

    def suspensions(snapshot):
        plan, _ = plan_with_capacity(snapshot, flood, ON, None, profiles=tc.profiles,
                                     capacity_policy=CapacityPolicy(min_hold_s=0.0), base=base_with())
        return [a for a in plan.actions if isinstance(a, ScaleTraining) and a.workers == 0]

    assert snap.suspended_jobs == ()  # the simulator lists suspended jobs (none yet)
    assert suspensions(snap), "minimums are not enough for a flood: the cheapest jobs are suspended"
    assert suspensions(replace(snap, suspended_jobs=None)) == []  # a source blind to them never suspends


def test_a_suspended_job_is_in_the_view_with_zero_workers_and_comes_back(tide):
    sim, tc = tide
    job = sorted(sim.training_jobs)[0]
    sim.scale_training(job, 0)
    try:
        snap = sim.snapshot()
        assert [j.name for j in snap.suspended_jobs] == [job]
        view = view_from_snapshot(snap, tc.profiles)
        assert {j.name: j.workers for j in view.jobs}[job] == 0
        plan, _ = plan_with_capacity(snap, loan_forecast(tc, snap.time), ON, None, profiles=tc.profiles,
                                     capacity_policy=CapacityPolicy(min_hold_s=0.0), base=base_with())
        grow = [a for a in plan.actions if isinstance(a, ScaleTraining) and a.job == job]
        assert grow and grow[0].workers > 0 and grow[0].previous_workers == 0  # idle GPUs resume it
    finally:
        sim.scale_training(job, sim.training_jobs[job].workers)


def test_the_view_marks_a_job_whose_pods_say_a_resize_restarts_it(tide):
    sim, tc = tide
    snap = sim.snapshot()
    job = sorted(sim.training_jobs)[0]
    marked = replace(snap, workloads=tuple(replace(w, restarts_on_resize=True) if w.owner == job else w
                                           for w in snap.workloads))
    restarts = {j.name: j.restarts_on_resize for j in view_from_snapshot(marked, tc.profiles).jobs}
    assert restarts[job] and not any(v for name, v in restarts.items() if name != job)
