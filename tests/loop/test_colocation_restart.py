"""A co-location shrink is given back after a restart or a change of leader.

Co-location shrinks an elastic training job that shares a GPU with a service near its latency SLO and grows it back
once the service has had `slackReadings` cycles of slack. The shrink used to live only in the planner's memory
(`ColocationState.shrunk`): a restarted controller left the job shrunk until its owner resized it. It is now recorded
on the job in the resize's own patch (`gputide.io/colocation-shrunk`) and read back into its pods
(`Workload.colocation_from`), and `colocation.observe` adopts what its memory lacks.

The cluster here is one Job's JSON, written with the Kubernetes actuator's patches (`k8s_jobs.shrink_patch`,
`k8s_jobs.colocation_patch`) and read back as `KubernetesWorkloads` reads it, around the pure planner; the
simulator's record (`SimActuator`, `SimCluster.colocation_records`) at the end.
"""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer import fleet as fleet_mod
from balancer.actuate import k8s_jobs
from balancer.actuate.base import Outcome
from balancer.actuate.sim import SimActuator
from balancer.colocation_record import ColocationRecord
from balancer.config import BalancerPolicy
from balancer.model import Node, ScaleTraining, ServiceStatus, WorkloadClass
from balancer.plan import colocation
from balancer.plan.planner import PlannerState, acknowledge, plan
from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec

FL = make_fleet(3, 4)
POLICY = BalancerPolicy()
SLOT = (0, 4, 8, 5)   # where the job's workers run; GPU 0 is shared with the service
PRESSURE, SLACK = 0.45, 0.1   # the service's p99 (its SLO is 0.5 s)
T0 = 1000.0


def job(workers: int) -> dict:
    return {"metadata": {"name": "job", "annotations": {}}, "spec": {"parallelism": workers}}


def write(obj: dict, a: ScaleTraining) -> dict:
    """The Job after the Kubernetes actuator's patch for `a`: its size and its records in the same write."""
    notes = {**obj["metadata"]["annotations"], **k8s_jobs.shrink_patch(obj, a.workers, a.shrunk_from).get(
        "annotations", {}), **k8s_jobs.colocation_patch(obj, a)}
    return {"metadata": {"name": "job", "annotations": {k: v for k, v in notes.items() if v is not None}},
            "spec": {"parallelism": a.workers}}


def observe(obj: dict, p99: float, pods: int | None = None, time: float = T0):
    """The snapshot: the Job's pods carrying its co-location record as `KubernetesWorkloads` reads it (`pods`: as
    many pods as a lagging pod list still shows, else the Job's size)."""
    record, void = k8s_jobs.colocation_record(obj)
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      elastic_max=8, priority=10, colocation_from=record.before if record else 0,
                      colocation_service=record.service if record else "",
                      colocation_overridden=void), (SLOT[i],))
            for i in range(k8s_jobs.size(obj) if pods is None else pods)]
    svc = workload("svc-0", owner="svc", milli=500)
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=p99, slo_latency_s=0.5, replicas=1)}
    return snapshot(FL, workloads=[(svc, (0,)), *pods], services=services, time=time)


def reconcile(obj: dict, state: PlannerState, p99: float, read: dict | None = None, pods: int | None = None,
              time: float = T0):
    """One cycle: plan on a read of the Job (`read`: an older one a lagging list still shows), apply the job's
    resizes to the Job, acknowledge. Returns the resizes, the Job, the state."""
    snap = observe(obj if read is None else read, p99, pods, time)
    p, state = plan(snap, None, POLICY, state)
    resizes = [a for a in p.actions if isinstance(a, ScaleTraining)]
    for a in resizes:
        obj = write(obj, a)
    return resizes, obj, acknowledge(state, p.actions, snap)


def shrunk() -> dict:
    (a,), obj, _ = reconcile(job(4), PlannerState(), PRESSURE)
    assert (a.cause, a.previous_workers, a.workers, a.service) == ("colocation_slo", 4, 3, "svc")
    assert k8s_jobs.colocation_record(obj) == (ColocationRecord(4, 3, "svc"), False)
    return obj


def slack_cycles(obj: dict, state: PlannerState, n: int) -> tuple[list, dict, PlannerState]:
    seen = []
    for _ in range(n):
        resizes, obj, state = reconcile(obj, state, SLACK)
        seen += [(a.cause, a.previous_workers, a.workers) for a in resizes]
    return seen, obj, state


def test_a_restarted_controller_gives_colocations_workers_back_once_the_service_has_slack():
    obj = shrunk()
    seen, obj, state = slack_cycles(obj, PlannerState(), POLICY.colocation.slack_readings + 2)   # memory lost
    assert seen == [("colocation_slack", 3, 4)], seen
    assert k8s_jobs.size(obj) == 4 and k8s_jobs.colocation_record(obj) == (None, False)
    assert k8s_jobs.COLOCATION_ANNOTATION not in obj["metadata"]["annotations"] and not state.colocation.shrunk


def test_a_restarted_controller_under_pressure_does_not_shrink_the_job_again():
    obj = shrunk()
    state = PlannerState()
    for _ in range(3):
        resizes, obj, state = reconcile(obj, state, PRESSURE)
        assert not resizes and k8s_jobs.size(obj) == 3
    assert dict(state.colocation.shrunk) == {"job": (4, "svc")}


def test_a_job_resized_by_its_owner_after_the_shrink_is_left_as_they_set_it_after_a_restart():
    obj = shrunk()
    obj["spec"]["parallelism"] = 2   # kubectl scale: the record reads void
    seen, obj, state = slack_cycles(obj, PlannerState(), POLICY.colocation.slack_readings + 2)
    assert seen == [] and k8s_jobs.size(obj) == 2 and not state.colocation.shrunk


def test_a_job_grown_back_by_someone_else_is_no_longer_owed():
    """Memory said 'shrunk, owed 4' while the job already ran 4: co-location held it shrunk (no new shrink of it)."""
    obj = shrunk()
    _, _, state = reconcile(obj, PlannerState(), PRESSURE)
    assert state.colocation.shrunk
    obj["spec"]["parallelism"] = 4
    _, _, state = reconcile(obj, state, PRESSURE * 0.9)
    assert "job" not in state.colocation.shrunk


def test_a_shrink_handed_to_the_tide_is_not_adopted_again_from_its_record_until_a_new_shrink():
    """Capacity mode: the tide takes over co-location's give-back (`capacity_loop`); adopting the record again
    every cycle held the job 'shrunk' for ever, so co-location never shrank it again."""
    obj = shrunk()
    snap = observe(obj, SLACK)
    state = colocation.observe(snap, POLICY, colocation.ColocationState())
    assert dict(state.shrunk) == {"job": (4, "svc")}
    state = colocation.hand_over(state, {"job"})
    state = colocation.observe(snap, POLICY, state)
    assert not state.shrunk and state.handed == {"job"}
    again = ScaleTraining(reason="t", job="job", workers=2, previous_workers=3, cause="colocation_slo", service="svc")
    state = colocation.acknowledge(state, again, T0)
    assert dict(state.shrunk) == {"job": (3, "svc")} and not state.handed
    state = colocation.observe(observe(job(4), SLACK), POLICY, colocation.hand_over(state, {"job"}))
    assert not state.handed   # no record shown any more: nothing left to ignore


def test_a_shrink_just_made_is_kept_while_the_pods_still_show_the_old_size():
    """Pods being deleted still run through their grace period: the pod list shows 4 after the shrink to 3."""
    (a,), obj, state = reconcile(job(4), PlannerState(), PRESSURE)
    resizes, obj, state = reconcile(obj, state, PRESSURE, pods=4)
    assert resizes == [] and dict(state.colocation.shrunk) == {"job": (4, "svc")}


def test_a_shrink_just_made_is_kept_while_neither_list_shows_it_then_judged_once_fresh_s_has_passed():
    old = job(4)
    (a,), obj, state = reconcile(old, PlannerState(), PRESSURE)
    resizes, obj, state = reconcile(obj, state, PRESSURE, read=old)   # the Job and pod lists both before the write
    assert resizes == [] and dict(state.colocation.shrunk) == {"job": (4, "svc")}
    _, _, later = reconcile(obj, state, SLACK, read=old, time=T0 + colocation.FRESH_S + 1)
    assert "job" not in later.colocation.shrunk   # a read that still shows 4 workers and no record: back at 4


def test_a_give_back_is_not_made_again_on_a_read_that_still_shows_the_record():
    (a,), obj, state = reconcile(job(4), PlannerState(), PRESSURE)
    stale = obj
    for _ in range(POLICY.colocation.slack_readings + 1):   # until the give-back, on reads that keep up
        resizes, obj, state = reconcile(obj, state, SLACK)
        if resizes:
            break
    assert [(r.cause, r.workers) for r in resizes] == [("colocation_slack", 4)] and k8s_jobs.size(obj) == 4
    resizes, obj, state = reconcile(obj, state, SLACK, read=stale)   # the lists still show {4, 3} and 3 pods
    assert resizes == [] and not state.colocation.shrunk
    _, _, state = reconcile(obj, state, SLACK)
    assert not state.colocation.handed   # the record is gone from the reads: nothing left to ignore


def test_a_job_resized_by_its_owner_after_the_shrink_is_theirs_without_a_restart_too():
    (a,), obj, state = reconcile(job(4), PlannerState(), PRESSURE)
    obj["spec"]["parallelism"] = 2   # kubectl scale: the record reads void
    seen = []
    for i in range(POLICY.colocation.slack_readings + 2):
        resizes, obj, state = reconcile(obj, state, SLACK, time=T0 + colocation.FRESH_S + i)
        seen += resizes
    assert seen == [] and k8s_jobs.size(obj) == 2 and not state.colocation.shrunk


def sim_cluster() -> SimCluster:
    fl = fleet_mod.build("t", [Node(name=f"n{i}", gpu_model="A100-SXM4-80GB", gpu_count=4) for i in range(2)])
    sim = SimCluster(fl, seed=0, step_s=60.0)
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_max=4, elastic_min=1))
    sim.add_service(ServiceSpec(name="svc", replicas=2))
    return sim


def apply(sim: SimCluster, **kw) -> None:
    a = ScaleTraining(reason="t", job="job", **kw)
    assert SimActuator(sim).apply(a, sim.snapshot()).outcome is Outcome.APPLIED


def recorded(sim: SimCluster) -> set[tuple[int, str]]:
    return {(w.colocation_from, w.colocation_service) for w in sim.snapshot().workloads if w.owner == "job"}


def test_the_simulator_keeps_the_record_as_a_kubernetes_job_does():
    sim = sim_cluster()
    apply(sim, workers=3, previous_workers=4, cause="colocation_slo", service="svc")
    assert recorded(sim) == {(4, "svc")}
    apply(sim, workers=2, previous_workers=3, shrunk_from=3)   # a hotspot shrink keeps it valid at 2
    assert recorded(sim) == {(4, "svc")}
    sim.scale_training("job", 1)   # the operator's size: void, kept until gputide's next resize
    assert recorded(sim) == {(0, "")} and sim.colocation_records
    assert {w.colocation_overridden for w in sim.snapshot().workloads if w.owner == "job"} == {True}
    apply(sim, workers=2, previous_workers=1, cause="loan")
    assert not sim.colocation_records


def test_the_simulator_records_the_workers_a_job_asked_for_with_some_pending():
    def pending_job() -> tuple[SimCluster, int]:
        sim = sim_cluster()
        sim.scale_training("job", 9)   # 9 asked for, fewer GPUs free for it: some wait
        running = sum(1 for w in sim.snapshot().workloads if w.owner == "job" and w.name in sim.placements)
        assert 0 < running < 9
        return sim, running

    sim, running = pending_job()
    apply(sim, workers=running - 1, previous_workers=running, shrunk_from=running)   # a hotspot shrink
    assert list(sim.shrink_records.values()) == [(9, running - 1)]
    sim, running = pending_job()
    apply(sim, workers=running - 1, previous_workers=running, cause="colocation_slo", service="svc")
    assert recorded(sim) == {(9, "svc")}


def test_memory_takes_the_larger_workers_before_a_record_shows():
    obj = {"metadata": {"name": "job", "annotations": {
        k8s_jobs.COLOCATION_ANNOTATION: ColocationRecord(4, 2, "svc").note()}}, "spec": {"parallelism": 2}}
    remembered = colocation.ColocationState(shrunk={"job": (3, "svc")})   # acknowledged: 3 were running
    assert dict(colocation.observe(observe(obj, SLACK), POLICY, remembered).shrunk) == {"job": (4, "svc")}
