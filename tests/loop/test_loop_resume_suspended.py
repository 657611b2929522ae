"""The loop's check on the fresh snapshot before acting lets a suspended training job resume.

The capacity planner may suspend an elastic job (0 workers) when the sources list suspended jobs
(`ClusterSnapshot.suspended_jobs`), and resumes it later onto idle GPUs (`ScaleTraining` 0 -> k). Such a job has no
pods, so the projection the loop checks each action against (`Projection` on the fresh snapshot) counted no worker of
it and refused the resume as "no such training job" (stale_plan): a suspended job never grew back.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from loop_helpers import make_fleet, snapshot, workload
from test_loop_held_back_move import Sent
from test_loop_metrics import Source

from balancer import config
from balancer.actuate.base import Outcome
from balancer.actuate.sim import SimActuator
from balancer.app import scenarios, tidal
from balancer.inventory import SuspendedJob
from balancer.loop import Reconciler
from balancer.model import Forecast, Plan, ScaleTraining
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.simulate import Projection
from balancer.safety import SafetyGuard
from balancer.telemetry.sim import SimTelemetrySource

SUSPENDED = SuspendedJob(name="job", namespace="training", elastic_min=1, elastic_max=4)
# GPUs 1-7 idle: one service replica on GPU 0, the job suspended (no pods)
SNAP = replace(snapshot(make_fleet(2, 4), workloads=[(workload("svc-0"), (0,))], age=0.0),
               suspended_jobs=(SUSPENDED,))


def resume(job: str) -> ScaleTraining:
    return ScaleTraining(job=job, workers=3, previous_workers=0, reason="loan idle GPUs to training",
                         cause="loan", expected_gain=2.0)


def cycle(actions, **guarded):
    actuator = Sent()
    rec = Reconciler(source=Source(SNAP), actuator=actuator, clock=lambda: SNAP.time, **guarded,
                     planner=lambda snap, forecasts, policy, state: (Plan(actions=tuple(actions)), state))
    report = rec.run_once()
    assert report.status == "ok", report.reason
    return report, actuator.sent


def test_a_suspended_job_is_resumed_not_rejected_as_stale():
    report, applied = cycle([resume("job"), resume("gone")])
    assert applied == [resume("job")]
    assert [(r.action.job, r.outcome) for r in report.results] == [("job", Outcome.APPLIED)]
    # a job the fresh snapshot neither runs nor lists suspended (deleted meanwhile) is still refused
    assert [(a.job, why) for a, why in report.rejected] == [("gone", "stale_plan")]


def test_a_resume_below_the_suspended_jobs_elastic_minimum_does_not_fit():
    # no worker is placed to read the minimum from: the snapshot's listing of the job has it
    snap = replace(SNAP, suspended_jobs=(replace(SUSPENDED, elastic_min=3),))
    short = ScaleTraining(job="job", workers=1, previous_workers=0, reason="x", expected_gain=2.0)
    assert Projection(snap, config.BalancerPolicy()).apply(short) == "below the job's elastic minimum (3)"
    assert Projection(snap, config.BalancerPolicy()).apply(resume("job")) is None


def test_a_resume_into_a_stopped_namespace_is_held_by_the_emergency_stop():
    # the job has no pods: the guard finds its namespace in the snapshot's list of suspended jobs
    policy = config.BalancerPolicy()
    guard = SafetyGuard(policy.safety, stopped_namespaces={"training"})
    report, applied = cycle([resume("job")], guard=guard, policy=policy)
    assert applied == []
    assert [(a.job, why) for a, why in report.rejected] == [("job", "emergency_stop")]


def test_a_resume_into_a_protected_namespace_is_refused():
    policy = config.BalancerPolicy(safety=config.SafetyPolicy(protected_namespaces=("kube-system", "training")))
    report, applied = cycle([resume("job")], guard=SafetyGuard(policy.safety), policy=policy)
    assert applied == []
    assert [(a.job, why) for a, why in report.rejected] == [("job", "protected")]


@pytest.fixture(scope="module")
def tide():
    sim, _events, _days = scenarios.build("tidal", days=1)
    return sim, tidal.context(sim)


def test_the_capacity_planner_resumes_a_job_suspended_on_the_simulator_through_the_loop(tide):
    sim, tc = tide
    job = sorted(sim.training_jobs)[0]
    sim.scale_training(job, 0)
    try:
        assert [j.name for j in sim.snapshot().suspended_jobs] == [job]
        policy = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))

        def planner(snap, forecasts, policy, state):
            low = {name: Forecast(service=name, issued_at=snap.time, step_s=600.0,
                                  quantiles={q: np.full(24, 0.2) for q in (0.5, 0.9, 0.99)}) for name in tc.shares}
            return plan_with_capacity(snap, low, policy, state, profiles=tc.profiles,
                                      capacity_policy=CapacityPolicy(min_hold_s=0.0),
                                      base=lambda s, f, p, st: (Plan(), st or planner_mod.PlannerState()))

        rec = Reconciler(source=SimTelemetrySource(sim), actuator=SimActuator(sim), policy=policy,
                         clock=lambda: sim.time, planner=planner)
        report = rec.run_once()
        assert report.status == "ok", report.reason
        assert job not in {a.job for a, _ in report.rejected if isinstance(a, ScaleTraining)}
        resumed = [r for r in report.results if isinstance(r.action, ScaleTraining) and r.action.job == job]
        assert [(r.action.previous_workers, r.outcome) for r in resumed] == [(0, Outcome.APPLIED)]
        assert resumed[0].action.workers > 0 and sim.snapshot().suspended_jobs == ()
    finally:
        sim.scale_training(job, sim.training_jobs[job].workers)
