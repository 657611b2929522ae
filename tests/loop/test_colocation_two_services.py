"""A job co-location shrank for two pressured services is given back only once both have slack.

The job's workers share GPU 0 with service a and GPU 4 with service b; both come under pressure and the job is shrunk
by a worker per service. Before, the shrink recorded only the first service (a): once a had `slackReadings` of slack
the job was grown back next to b, still under pressure, and shrunk again the next cycle, over and over while b stayed
pressured. The shrink now records both (`a,b`, also in the Job's `gputide.io/colocation-shrunk`, which a restarted
controller adopts) and waits for each.
"""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer import colocation_record
from balancer.config import BalancerPolicy
from balancer.model import ScaleTraining, ServiceStatus, WorkloadClass
from balancer.plan.planner import PlannerState, acknowledge, plan

FL = make_fleet(3, 4)
SLOT = (0, 4, 8)   # the job's workers: GPU 0 shared with a, GPU 4 with b
POLICY = BalancerPolicy()
SHRINKS: list[ScaleTraining] = []


def observe(workers: int, p99: dict[str, float], t: int):
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      elastic_max=8, priority=10), (SLOT[i],)) for i in range(workers)]
    serving = [(workload("a-0", owner="a", milli=500), (0,)), (workload("b-0", owner="b", milli=500), (4,))]
    services = {n: ServiceStatus(name=n, demand_rps=10, p99_latency_s=p, slo_latency_s=0.5, replicas=1)
                for n, p in p99.items()}
    return snapshot(FL, workloads=serving + pods, services=services, time=1000.0 + 60 * t)


def run(cycles: list[dict[str, float]]) -> list[tuple[int, str | None, int, int]]:
    """The job's resizes over `cycles` (each the services' p99), applied and acknowledged as the loop would."""
    workers, state, seen = 3, PlannerState(), []
    for t, p99 in enumerate(cycles):
        snap = observe(workers, p99, t)
        p, state = plan(snap, None, POLICY, state)
        for a in (a for a in p.actions if isinstance(a, ScaleTraining)):
            workers = a.workers
            seen.append((t, a.cause, a.previous_workers, a.workers))
            if a.cause == "colocation_slo":
                SHRINKS.append(a)
        state = acknowledge(state, p.actions, snap)
    return seen


def test_the_give_back_waits_for_every_service_the_shrink_made_room_for():
    n = POLICY.colocation.slack_readings
    seen = run([{"a": 0.45, "b": 0.45}] + [{"a": 0.1, "b": 0.45}] * (n + 5))   # a has slack, b stays pressured
    assert seen == [(0, "colocation_slo", 3, 1)], seen
    seen = run([{"a": 0.45, "b": 0.45}] + [{"a": 0.1, "b": 0.1}] * (n + 2))    # both have slack: given back
    assert seen == [(0, "colocation_slo", 3, 1), (n, "colocation_slack", 1, 3)], seen
    a = SHRINKS[-1]   # both services recorded, on the Job too
    assert a.service == "a,b" and colocation_record.after(None, 3, a) == colocation_record.ColocationRecord(3, 1, "a,b")
