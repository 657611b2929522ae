"""Co-location's give-back waits while a worker of its job runs on a hot node, the one kept open in a heat wave too
(s33h13, audit s33a7 of 2154ce8). 2154ce8 built the projection with the hot nodes the taint closes
(`Projection.hot_nodes`: the kept one left out, so its taint's removal is no needless-taint loss), and co-location read
that set to hold a give-back: a job it shrank, with its workers on the kept node, grew back while the node was hot.
Now co-location is given every hot node (`colocation.propose(hot=...)`); only the taint's decision leaves the kept
node out."""

from __future__ import annotations

from balancer.config import BalancerPolicy
from balancer.model import ScaleTraining, ServiceStatus, WorkloadClass
from balancer.plan.planner import PlannerState, acknowledge, plan
from tests.loop.loop_helpers import make_fleet, snapshot, workload

FL = make_fleet(3, 4)   # A100, slowdown 89 C; n0: GPUs 0-3, n1: 4-7, n2: 8-11
POLICY = BalancerPolicy()
SLOT = (4, 5, 6, 7)     # the job's workers, all on n1; GPU 4 shared with the service
HEAT_WAVE = {0: 100.0, 8: 100.0, 7: 97.0}   # every node hot, n1 the coolest: kept open (GPU 7 idle once shrunk)


def cycle(state: PlannerState, workers: int, p99: float, temps: dict | None, i: int):
    pods = [(workload(f"job-{k}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      elastic_max=8, priority=10), (SLOT[k],)) for k in range(workers)]
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=p99, slo_latency_s=0.5, replicas=1)}
    snap = snapshot(FL, workloads=[(workload("svc-0", owner="svc", milli=500), (4,)), *pods], services=services,
                    temps=temps, time=1000.0 + 30 * i)
    p, state = plan(snap, None, POLICY, state)
    return p, acknowledge(state, p.actions, snap)


def resizes(p) -> list[tuple]:
    return [(a.cause, a.previous_workers, a.workers) for a in p.actions if isinstance(a, ScaleTraining)]


def shrunk_by_colocation() -> PlannerState:
    p, state = cycle(PlannerState(), 4, 0.45, None, 0)
    assert resizes(p) == [("colocation_slo", 4, 3)]
    return state


def test_the_give_back_waits_while_the_jobs_node_is_the_hot_one_kept_open():
    state, seen = shrunk_by_colocation(), []
    hot = POLICY.colocation.slack_readings + POLICY.hotspots.hot_readings + 2
    for i in range(1, 1 + hot):   # slack, every node hot
        p, state = cycle(state, 3, 0.1, HEAT_WAVE, i)
        seen += resizes(p)
    assert any("n1 kept open" in n for n in p.notes)
    assert seen == [], "a give-back onto the hot node kept open"   # was [("colocation_slack", 3, 4)]
    assert dict(state.colocation.shrunk) == {"job": (4, "svc")}
    for i in range(1 + hot, 1 + hot + POLICY.hotspots.cool_readings + 2):   # n1 cools: the workers come back
        p, state = cycle(state, 4 if seen else 3, 0.1, {0: 100.0, 8: 100.0}, i)
        seen += resizes(p)
    assert seen == [("colocation_slack", 3, 4)], seen
