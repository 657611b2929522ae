"""A give-back asks for no more workers than the job can run now.

A Job with `completions` runs at most `completions - succeeded` pods (`k8s_jobs.worker_limit`; the Kubernetes reader
caps its pods' `elastic_max` at it). A job shrunk by a hotspot or by co-location from 4 workers whose limit has
since fallen to 3 (a worker finished) used to be given back 4: the actuator refused it (`PermanentActuationError`),
and the same refused give-back came back every cycle, counted as an actuation error each time. It is now given back
what it can run (`shrink_records.runnable`), and a job already there is owed nothing.
"""

from __future__ import annotations

from dataclasses import replace

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import ScaleTraining, ServiceStatus, WorkloadClass
from balancer.plan import colocation
from balancer.plan.planner import PlannerState, acknowledge, plan
from balancer.plan.shrink_records import runnable, shrunk_jobs

FL = make_fleet(3, 4)
POLICY = BalancerPolicy()


def snap(workers: int, elastic_max: int, *, shrunk_from: int = 0, p99: float = 0.1):
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      elastic_max=elastic_max, shrunk_from=shrunk_from), (4 + i,)) for i in range(workers)]
    svc = workload("svc-0", owner="svc", milli=500)
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=p99, slo_latency_s=0.5, replicas=1)}
    return snapshot(FL, workloads=[(svc, (0,)), *pods], services=services)


def test_runnable_caps_at_the_pods_elastic_max_and_leaves_a_job_without_one_alone():
    assert runnable(snap(2, 3), "job", 4) == 3
    assert runnable(snap(2, 8), "job", 4) == 4
    assert runnable(snap(2, 0), "job", 4) == 4
    assert runnable(snap(0, 3), "gone", 4) == 4


def test_a_hotspot_shrink_is_owed_only_what_the_job_can_run():
    assert shrunk_jobs(snap(2, 3, shrunk_from=4), {}) == {"job": 3}
    assert shrunk_jobs(snap(3, 3, shrunk_from=4), {}) == {}   # already at what it can run: owed nothing
    assert shrunk_jobs(snap(2, 3), {"job": 4}) == {"job": 3}   # remembered, not recorded: the same


def give_backs(s, state: PlannerState) -> list[tuple[int, int, str | None]]:
    p, _ = plan(s, None, POLICY, state)
    return [(a.previous_workers, a.workers, a.cause) for a in p.actions if isinstance(a, ScaleTraining)]


def test_the_hotspot_give_back_asks_for_what_the_job_can_run():
    assert give_backs(snap(2, 3, shrunk_from=4), PlannerState()) == [(2, 3, None)]


def test_the_colocation_give_back_asks_for_what_the_job_can_run_then_forgets_the_shrink():
    held = colocation.ColocationState(shrunk={"job": (4, "svc")},
                                      slack_streak={"svc": POLICY.colocation.slack_readings})
    assert give_backs(snap(2, 3), PlannerState(colocation=held)) == [(2, 3, "colocation_slack")]
    _, state = plan(snap(3, 3), None, POLICY, PlannerState(colocation=held))
    assert not state.colocation.shrunk   # at what it can run: nothing owed, nothing held


def pressured(workers: int, elastic_min: int, elastic_max: int):
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=elastic_min,
                      elastic_max=elastic_max), (i * 4,)) for i in range(workers)]
    svc = workload("svc-0", owner="svc", milli=500)
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=0.45, slo_latency_s=0.5, replicas=1)}
    return snapshot(FL, workloads=[(svc, (0,)), *pods], services=services)


def test_colocation_never_stops_a_job_nor_shrinks_one_that_is_not_elastic():
    """A stop (0 workers) would never be resumed outside capacity mode: the job was gone for good. A job without
    an elastic maximum (`elastic_max` 0: a pod classed training by its label, no gputide.io/elastic-* annotations)
    runs the size its owner set: shrinking a fixed-size job breaks it."""
    assert give_backs(pressured(2, 0, 8), PlannerState()) == [(2, 1, "colocation_slo")]   # shrinks, the GPU shared
    assert give_backs(pressured(1, 0, 8), PlannerState()) == []   # its last worker: not stopped
    assert give_backs(pressured(2, 1, 0), PlannerState()) == []   # not elastic


def test_a_job_at_what_it_can_run_is_not_held_by_a_record_that_still_shows():
    """Co-location shrank a Job of 4 to 3 (record {4, 3}); then a worker finished (completions - succeeded = 3): the
    record stays valid, but 3 is all it can run. Held 'shrunk' for ever, it was never shrunk again under pressure
    and the owed-workers gauge stayed at 1."""
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      elastic_max=3, colocation_from=4, colocation_service="svc"), (4 + i,)) for i in range(3)]
    svc = workload("svc-0", owner="svc", milli=500)
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=0.1, slo_latency_s=0.5, replicas=1)}
    s = snapshot(FL, workloads=[(svc, (0,)), *pods], services=services)
    state = colocation.observe(s, POLICY, colocation.ColocationState())
    assert not state.shrunk and state.handed == {"job"}
    assert not colocation.observe(s, POLICY, state).shrunk   # the record is not adopted again


def test_a_hotspot_does_not_shrink_a_job_that_is_not_elastic():
    from test_loop_shrunk_jobs import hot_job_cluster
    sim, _ = hot_job_cluster()
    state = PlannerState()
    for _ in range(8):   # the planner as it runs, throttles acknowledged, until it would shrink the job
        sim.step()
        snap = sim.snapshot()
        p, after = plan(snap, None, POLICY, state)
        if any(isinstance(a, ScaleTraining) for a in p.actions):
            break
        state = acknowledge(after, p.actions, snap)
    else:
        raise AssertionError("the hot job was never shrunk")
    fixed = replace(snap, workloads=tuple(replace(w, elastic_max=0) if w.owner == "job" else w
                                          for w in snap.workloads))
    p, _ = plan(fixed, None, POLICY, state)   # the same cycle, the job not elastic
    assert not any(isinstance(a, ScaleTraining) for a in p.actions)
