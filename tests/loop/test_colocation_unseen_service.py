"""Co-location tells a service that is gone from one that is only unseen, and reads no slack from unknown latency.

A job shrunk for service a (pressured on a GPU they share) was given back as soon as a's serving series vanished
(a scrape down) while its pod still ran: `_give_backs` counted any service missing from the snapshot's services as
gone, and put training back onto the GPU of a service last seen under pressure. A service whose pods are still in the
snapshot is unseen: the shrink is held, and a note says why; only once no pod of it is left is it gone.

A p99 absent while requests arrive (`serving.LATENCY_UNKNOWN`, NaN) read 0 s: slack, so co-location gave workers back
and never shrank for the service. Unknown is no latency evidence: neither slack nor pressure, and the planner's
projection (its SLO term) leaves it out instead of turning the whole objective NaN.
"""

from __future__ import annotations

import math

from loop_helpers import make_fleet, snapshot, workload

from balancer.config import BalancerPolicy
from balancer.model import ScaleTraining, ServiceStatus, WorkloadClass
from balancer.plan.planner import PlannerState, acknowledge, plan
from balancer.plan.simulate import Projection
from balancer.telemetry.serving import read_services

FL = make_fleet(3, 4)
SLOT = (0, 4, 8)   # the job's workers: GPU 0 shared with service a
POLICY = BalancerPolicy()
PRESSURED, SLACK = 0.45, 0.1   # p99 against a 0.5 s SLO: over slo_pressure 0.8, under slo_slack 0.5


def observe(workers: int, p99: dict[str, float], t: int, *, a_pod: bool = True):
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      elastic_max=8, priority=10), (SLOT[i],)) for i in range(workers)]
    serving = [(workload("b-0", owner="b", milli=500), (11,))]
    serving += [(workload("a-0", owner="a", milli=500), (0,))] if a_pod else []
    services = {n: ServiceStatus(name=n, demand_rps=10, p99_latency_s=p, slo_latency_s=0.5, replicas=1)
                for n, p in p99.items()}
    return snapshot(FL, workloads=serving + pods, services=services, time=1000.0 + 60 * t)


def run(readings, a_pod=lambda t: True):
    """Cycles of the planner over `readings` ({service: p99} per cycle): the job's resizes, each cycle's notes."""
    workers, state, resizes, notes = 3, PlannerState(), [], []
    for t, p99 in enumerate(readings):
        snap = observe(workers, p99, t, a_pod=a_pod(t))
        p, state = plan(snap, None, POLICY, state)
        for a in p.actions:
            if isinstance(a, ScaleTraining):
                workers = a.workers
                resizes.append((t, a.cause, a.workers, a.reason))
        notes.append(p.notes)
        state = acknowledge(state, p.actions, snap)
    return resizes, notes, state


def test_a_service_whose_series_vanish_while_its_pod_runs_keeps_the_shrink():
    resizes, notes, state = run([{"a": PRESSURED, "b": SLACK}] * 2 + [{"b": SLACK}] * 6)
    assert [(t, cause, n) for t, cause, n, _ in resizes] == [(0, "colocation_slo", 2)]
    assert dict(state.colocation.shrunk) == {"job": (3, "a")}
    assert any("a has no serving series while its pods run" in n and "keeps job shrunk" in n for n in notes[-1])


def test_a_service_with_no_pod_left_is_gone_and_the_workers_come_back():
    resizes, _, _ = run([{"a": PRESSURED, "b": SLACK}] * 2 + [{"b": SLACK}] * 4, a_pod=lambda t: t < 4)
    assert [(t, cause, n) for t, cause, n, _ in resizes] == [(0, "colocation_slo", 2), (4, "colocation_slack", 3)]
    assert "a is gone (no pod left)" in resizes[-1][3]


def test_series_that_return_need_their_slack_readings_again():
    n = POLICY.colocation.slack_readings
    readings = [{"a": PRESSURED, "b": SLACK}] + [{"b": SLACK}] * 3 + [{"a": SLACK, "b": SLACK}] * (n + 2)
    resizes, _, _ = run(readings)
    back = 4 + n - 1   # the streak counts from the series' return (cycle 4), not from before they vanished
    assert [(t, cause) for t, cause, _, _ in resizes] == [(0, "colocation_slo"), (back, "colocation_slack")]
    assert resizes[-1][3] == "a has latency slack again: give the workers back"


def test_an_unknown_p99_is_no_slack_for_a_held_shrink():
    resizes, notes, state = run([{"a": PRESSURED, "b": SLACK}] + [{"a": math.nan, "b": SLACK}] * 6)
    assert [cause for _, cause, _, _ in resizes] == ["colocation_slo"]
    assert dict(state.colocation.shrunk) == {"job": (3, "a")}
    assert any("a's p99 latency is unknown" in n and "job kept shrunk" in n for n in notes[-1])


def test_an_unknown_p99_read_from_the_series_neither_shrinks_nor_gives_back():
    """End to end from the serving rows: demand and no p99 series is no pressure and no slack."""
    rows = [{"metric": {"__name__": "gputide_inference_demand_rps", "service": s}, "value": [0, "50"]}
            for s in ("a", "b")]
    unknown = {n: st.p99_latency_s for n, st in read_services(rows, (), {}, 0.5)[0].items()}
    resizes, _, state = run([unknown] * 6)
    assert resizes == [] and dict(state.colocation.slack_streak) == {"a": 0, "b": 0}
    resizes, _, _ = run([{"a": PRESSURED, "b": SLACK}] + [unknown] * 6)
    assert [cause for _, cause, _, _ in resizes] == ["colocation_slo"]


def test_an_unknown_p99_leaves_the_projection_objective_finite():
    snap = observe(3, {"a": math.nan, "b": PRESSURED * 2}, 0)
    proj = Projection(snap, POLICY)
    assert "a" not in proj.slo_ratio and math.isfinite(proj.running_objective())
