"""A give-back asks for no more workers than the job can run now.

A Job with `completions` runs at most `completions - succeeded` pods (`k8s_jobs.worker_limit`; the Kubernetes reader
caps its pods' `elastic_max` at it). A job shrunk by a hotspot or by co-location from 4 workers whose limit has
since fallen to 3 (a worker finished) used to be given back 4: the actuator refused it (`PermanentActuationError`),
and the same refused give-back came back every cycle, counted as an actuation error each time. It is now given back
what it can run (`shrink_records.runnable`), and a job already there is owed nothing.
"""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import ScaleTraining, ServiceStatus, WorkloadClass
from balancer.plan import colocation
from balancer.plan.planner import PlannerState, plan
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
