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


def job(workers: int) -> dict:
    return {"metadata": {"name": "job", "annotations": {}}, "spec": {"parallelism": workers}}


def write(obj: dict, a: ScaleTraining) -> dict:
    """The Job after the Kubernetes actuator's patch for `a`: its size and its records in the same write."""
    notes = {**obj["metadata"]["annotations"], **k8s_jobs.shrink_patch(obj, a.workers, a.shrunk_from).get(
        "annotations", {}), **k8s_jobs.colocation_patch(obj, a)}
    return {"metadata": {"name": "job", "annotations": {k: v for k, v in notes.items() if v is not None}},
            "spec": {"parallelism": a.workers}}


def observe(obj: dict, p99: float):
    """The snapshot: the Job's pods carrying its co-location record as `KubernetesWorkloads` reads it."""
    record = k8s_jobs.colocation_record(obj)
    pods = [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", milli=500, mem=20480, elastic_min=1,
                      priority=10, colocation_from=record.before if record else 0,
                      colocation_service=record.service if record else ""), (SLOT[i],))
            for i in range(k8s_jobs.size(obj))]
    svc = workload("svc-0", owner="svc", milli=500)
    services = {"svc": ServiceStatus(name="svc", demand_rps=10, p99_latency_s=p99, slo_latency_s=0.5, replicas=1)}
    return snapshot(FL, workloads=[(svc, (0,)), *pods], services=services)


def reconcile(obj: dict, state: PlannerState, p99: float):
    """One cycle: plan, apply the job's resizes to the Job, acknowledge. Returns the resizes, the Job, the state."""
    snap = observe(obj, p99)
    p, state = plan(snap, None, POLICY, state)
    resizes = [a for a in p.actions if isinstance(a, ScaleTraining)]
    for a in resizes:
        obj = write(obj, a)
    return resizes, obj, acknowledge(state, p.actions, snap)


def shrunk() -> dict:
    (a,), obj, _ = reconcile(job(4), PlannerState(), PRESSURE)
    assert (a.cause, a.previous_workers, a.workers, a.service) == ("colocation_slo", 4, 3, "svc")
    assert k8s_jobs.colocation_record(obj) == ColocationRecord(4, 3, "svc")
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
    assert k8s_jobs.size(obj) == 4 and k8s_jobs.colocation_record(obj) is None
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
    state = colocation.acknowledge(state, again)
    assert dict(state.shrunk) == {"job": (3, "svc")} and not state.handed
    state = colocation.observe(observe(job(4), SLACK), POLICY, colocation.hand_over(state, {"job"}))
    assert not state.handed   # no record shown any more: nothing left to ignore


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
    sim.scale_training("job", 1)   # the operator's size: void, shown as none, kept until gputide's next resize
    assert recorded(sim) == {(0, "")} and sim.colocation_records
    apply(sim, workers=2, previous_workers=1, cause="loan")
    assert not sim.colocation_records
