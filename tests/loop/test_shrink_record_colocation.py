"""A hotspot shrink's record survives co-location's shrink and give-back of the same job.

A job a hotspot shrank from 4 workers to 3 carries the record `{"from": 4, "to": 3}` (a Kubernetes Job's
`gputide.io/shrunk`). When an inference service it shares a GPU with comes under latency pressure, co-location shrinks
it further and later grows it back to 3. Both resizes are gputide's own: they rewrite the record's "to" in the same
patch (`ScaleTraining.shrunk_from` carries the record's "from"), so the record stays valid and the hotspot planner
still gives the fourth worker back once the node is cool. Before, co-location's resize left the record's "to" at 3
while the Job ran 2 workers: the next read found the record void (resized by someone else), the planner forgot the
job, and the grow back to 3 removed the void record: the fourth worker was never given back. While co-location holds
the job shrunk, the hotspot give-back waits: it would undo the shrink while the service is still pressured.

The cluster here is one Job's JSON, written with `k8s_jobs.shrink_patch` (the Kubernetes actuator's patch) and read
back with `k8s_jobs.shrink_record` (what `KubernetesWorkloads` puts on the job's pods), around the pure planner.
"""

from __future__ import annotations

from dataclasses import replace

from loop_helpers import make_fleet, snapshot, workload

from balancer.actuate import k8s_jobs
from balancer.config import BalancerPolicy
from balancer.model import ScaleTraining, ServiceStatus, WorkloadClass
from balancer.plan.planner import PlannerState, acknowledge, plan

FL = make_fleet(3, 4)
POLICY = BalancerPolicy()
SLOT = (0, 4, 8, 5)   # where the job's workers run; GPU 0 is shared with the service


def job(workers: int, record: tuple[int, int] | None = None) -> dict:
    notes = {k8s_jobs.SHRUNK_ANNOTATION: k8s_jobs.shrink_note(*record)} if record else {}
    return {"metadata": {"name": "job", "annotations": notes}, "spec": {"parallelism": workers}}


def write(obj: dict, a: ScaleTraining) -> dict:
    """The Job after the Kubernetes actuator's patch for `a`: its size and the record in the same write."""
    notes = {**obj["metadata"]["annotations"], **k8s_jobs.shrink_patch(obj, a.workers, a.shrunk_from).get(
        "annotations", {})}
    return {"metadata": {"name": "job", "annotations": {k: v for k, v in notes.items() if v is not None}},
            "spec": {"parallelism": a.workers}}


def observe(obj: dict, p99: float, hot_gpu: int | None = None):
    """The snapshot: the Job's pods carrying its record as `KubernetesWorkloads` reads it, the service on GPU 0."""
    before, void = k8s_jobs.shrink_record(obj)
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      elastic_max=8, priority=10, shrunk_from=before, shrink_overridden=void), (SLOT[i],))
            for i in range(k8s_jobs.size(obj))]
    svc = workload("svc-0", owner="svc", milli=500)
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=p99, slo_latency_s=0.5, replicas=1)}
    temps = {hot_gpu: 100.0} if hot_gpu is not None else None
    return snapshot(FL, workloads=[(svc, (0,)), *pods], services=services, temps=temps)


def reconcile(obj: dict, state: PlannerState, p99: float, hot_gpu: int | None = None):
    """One cycle: plan, apply the job's resizes to the Job, acknowledge. Returns the resizes, the Job, the state."""
    snap = observe(obj, p99, hot_gpu)
    p, state = plan(snap, None, POLICY, state)
    resizes = [a for a in p.actions if isinstance(a, ScaleTraining)]
    for a in resizes:
        obj = write(obj, a)
    return resizes, obj, acknowledge(state, p.actions, snap)


def colocation_shrink() -> tuple[dict, PlannerState]:
    """The Job shrunk 4 -> 3 by a hotspot (its GPU 8 still read hot), then 3 -> 2 by co-location under pressure."""
    (a,), obj, state = reconcile(job(3, (4, 3)), PlannerState(), p99=0.45, hot_gpu=8)
    assert (a.workers, a.previous_workers, a.cause) == (2, 3, "colocation_slo")
    return obj, state


def test_colocations_shrink_keeps_the_hotspot_record_valid_at_the_new_size():
    obj, state = colocation_shrink()
    assert k8s_jobs.shrink_record(obj) == (4, False), obj
    assert dict(state.shrunk) == {"job": 4}


def test_the_hotspot_give_back_waits_while_colocation_holds_the_job_then_follows_its_grow_back():
    obj, state = colocation_shrink()
    seen = []
    for _ in range(POLICY.colocation.slack_readings + 3):
        resizes, obj, state = reconcile(obj, state, p99=0.1)   # slack, every GPU cool
        seen += [(a.cause, a.previous_workers, a.workers, a.shrunk_from) for a in resizes]
    assert seen == [("colocation_slack", 2, 3, 4), (None, 3, 4, 0)], seen
    assert k8s_jobs.size(obj) == 4 and k8s_jobs.shrink_record(obj) == (0, False) and not state.shrunk


def test_a_restarted_controller_gives_the_workers_back_from_the_record_colocation_rewrote():
    obj, state = colocation_shrink()
    for _ in range(POLICY.colocation.slack_readings):
        resizes, obj, state = reconcile(obj, state, p99=0.1)
    assert k8s_jobs.size(obj) == 3 and k8s_jobs.shrink_record(obj) == (4, False), obj
    resizes, obj, _ = reconcile(obj, PlannerState(), p99=0.1)   # restarted: only the Job remembers
    assert [(a.workers, a.shrunk_from) for a in resizes] == [(4, 0)]


def test_a_shrink_is_told_apart_by_its_cause_not_by_its_reason_text():
    """acknowledge() once read 'SLO' in the free-text reason to tell a co-location shrink from a hotspot one: a
    hotspot reason mentioning an SLO was remembered as co-location's (never given back by the hotspot path), and a
    co-location shrink worded otherwise as a hotspot's."""
    snap = observe(job(4), p99=0.1)
    hot = ScaleTraining(job="job", workers=3, previous_workers=4, reason="GPU hot; SLO of svc unaffected")
    colo = ScaleTraining(job="job", workers=3, previous_workers=4, reason="svc p99 over 0.8 x target",
                         cause="colocation_slo")
    after_hot = acknowledge(PlannerState(), [hot], snap)
    assert dict(after_hot.shrunk) == {"job": 4} and not after_hot.colocation.shrunk
    after_colo = acknowledge(PlannerState(), [colo], snap)
    assert not after_colo.shrunk and after_colo.colocation.shrunk["job"][0] == 4


def test_a_hotspot_shrink_of_a_job_colocation_holds_is_remembered_by_the_hotspot_planner_too():
    """Before, acknowledging it went to co-location only: the hotspot planner knew of it only from the Job's record,
    so a read that lagged the record's write (lists are cached) let it shrink the same job again."""
    snap = observe(job(3), p99=0.1)
    held = PlannerState(colocation=replace(PlannerState().colocation, shrunk={"job": (4, "svc")}))
    hot = ScaleTraining(job="job", workers=2, previous_workers=3, shrunk_from=3, reason="hotspot")
    after = acknowledge(held, [hot], snap)
    assert dict(after.shrunk) == {"job": 3} and dict(after.colocation.shrunk) == {"job": (4, "svc")}
    tide = ScaleTraining(job="job", workers=2, previous_workers=3, cause="reclaim", reason="tide")
    assert not acknowledge(held, [tide], snap).shrunk   # the tide's resize is not the hotspot's to give back
