"""Training jobs a hotspot shrank get their workers back after a restart or a change of leader.

The shrink is recorded on the job with the resize (`ScaleTraining.shrunk_from`; a Kubernetes Job's
`gputide.io/shrunk`, the simulator's `shrink_records`) and read back into the snapshot (`Workload.shrunk_from`), so
a planner that remembers nothing (a new `PlannerState`, as after a restart or a new term) still gives the workers
back once the GPU is cool. A job resized by someone else since is theirs; a job that is gone is forgotten.
"""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload

from balancer import fleet as fleet_mod
from balancer.actuate.base import Outcome
from balancer.actuate.sim import SimActuator
from balancer.config import BalancerPolicy
from balancer.model import Node, ScaleTraining, WorkloadClass
from balancer.plan.planner import PlannerState, acknowledge, plan
from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec

POLICY = BalancerPolicy()


def hot_job_cluster() -> tuple[SimCluster, str]:
    """Job `job` (4 workers) fills node n0, a service fills n1 (no migration target), and n0's cooling fails so
    badly that throttling cannot cool it: the planner shrinks the job."""
    fl = fleet_mod.build("t", [Node(name=f"n{i}", gpu_model="A100-SXM4-80GB", gpu_count=4) for i in range(2)])
    sim = SimCluster(fl, seed=0, step_s=60.0)
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_max=4))
    sim.add_service(ServiceSpec(name="svc", replicas=4))
    node = fl.gpus[sim.placements["training/job-w0"][0]].node
    sim.degrade_cooling(node, inlet_rise_c=30, resistance_factor=2.0)
    return sim, node


def cycle(sim: SimCluster, state: PlannerState) -> tuple[list[ScaleTraining], PlannerState]:
    """One reconcile: step, plan, apply through the simulator's actuator, acknowledge; the job's resizes applied."""
    sim.step()
    snap = sim.snapshot()
    p, state = plan(snap, None, POLICY, state)
    actuator = SimActuator(sim)
    applied = [a for a in p.actions if actuator.apply(a, snap).outcome is Outcome.APPLIED]
    return [a for a in applied if isinstance(a, ScaleTraining)], acknowledge(state, applied, snap)


def shrink(sim: SimCluster) -> PlannerState:
    state = PlannerState()
    for _ in range(6):
        scaled, state = cycle(sim, state)
        if scaled:
            (a,) = scaled
            assert (a.workers, a.previous_workers, a.shrunk_from) == (3, 4, 4)
            return state
    raise AssertionError("the hot job was never shrunk")


def test_a_restarted_planner_gives_back_the_workers_a_hotspot_took_once_the_gpu_is_cool():
    sim, node = hot_job_cluster()
    shrink(sim)
    assert sim.workers("job") == 3 and sim.shrink_records   # the record is in the cluster, not only in memory
    state = PlannerState()   # restarted mid-way, the node still hot: nothing given back, nothing shrunk again
    for _ in range(4):
        scaled, state = cycle(sim, state)
        assert not scaled and sim.workers("job") == 3
    assert dict(state.shrunk) == {"job": 4}
    sim.restore_cooling(node)
    given = []
    for _ in range(2 * POLICY.hotspots.cool_readings + 4):
        scaled, state = cycle(sim, state)
        given += scaled
    (back,) = given
    assert (back.workers, back.previous_workers, back.shrunk_from) == (4, 3, 0)
    assert sim.workers("job") == 4 and not sim.shrink_records and not state.shrunk


def test_a_job_scaled_by_hand_after_the_shrink_is_left_as_the_operator_set_it():
    sim, node = hot_job_cluster()
    state = shrink(sim)
    sim.scale_training("job", 2)   # the operator's size now: the record no longer matches it
    sim.restore_cooling(node)
    for fresh in (False, True):   # the planner that shrank it, and a restarted one
        state = PlannerState() if fresh else state
        for _ in range(2 * POLICY.hotspots.cool_readings + 2):
            scaled, state = cycle(sim, state)
            assert not scaled and sim.workers("job") == 2
        assert not state.shrunk


FL = make_fleet(2, 4)


def test_a_remembered_shrink_of_a_job_that_is_gone_is_dropped_not_proposed():
    svc = workload("svc-0")
    p, state = plan(snapshot(FL, workloads=[(svc, (0,))]), None, POLICY, PlannerState(shrunk={"job": 4}))
    assert not [a for a in p.actions if isinstance(a, ScaleTraining)] and not state.shrunk


def test_a_job_whose_pods_say_gputide_shrank_it_is_given_back_by_a_planner_that_remembers_nothing():
    job = [workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, priority=10, shrunk_from=4)
           for i in range(3)]
    p, state = plan(snapshot(FL, workloads=[(w, (i,)) for i, w in enumerate(job)]), None, POLICY, PlannerState())
    (back,) = [a for a in p.actions if isinstance(a, ScaleTraining)]
    assert (back.job, back.workers, back.previous_workers, back.shrunk_from) == ("job", 4, 3, 0)
