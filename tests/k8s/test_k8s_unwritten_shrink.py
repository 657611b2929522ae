"""A hotspot shrink that wrote nothing is not remembered as gputide's shrink.

The Kubernetes actuator leaves a Job its owner shrank since the plan's view as it is: the plan shrinks 4 -> 3, the Job
asks for 2 now, nothing is written ("(already)", `k8s_jobs.raises`), and the action is applied. The planner
remembered the plan's 4 all the same (`PlannerState.shrunk`) until its first give-back: meanwhile the hotspot planner
did not shrink that job again while its GPU stayed hot, and `gputide_shrunk_workers` counted 2 workers owed that
gputide never took. The actuator now says what it wrote (`ActionResult.unchanged`), the loop passes the applied
actions that wrote nothing to `acknowledge`, and a shrink among them is not remembered (co-location's likewise).
The dry-run actuator writes nothing."""

from __future__ import annotations

import numpy as np
from fakeapi import FakeKube, job

from balancer import fleet as fleet_mod
from balancer.actuate.base import Outcome
from balancer.actuate.dryrun import DryRunActuator
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.loop import Reconciler
from balancer.model import GPU_ARRAYS, ClusterSnapshot, Node, ScaleTraining
from balancer.plan.planner import PlannerState, acknowledge
from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec
from balancer.telemetry.sim import SimTelemetrySource
from tests.k8s.test_k8s_give_back_owner_size import NS, JobOnKube
from tests.k8s.test_k8s_shrink_record import SNAP


def shrink(workers: int = 3, previous: int = 4, job_name: str = "ml/train") -> ScaleTraining:
    return ScaleTraining(reason="test", job=job_name, workers=workers, previous_workers=previous, shrunk_from=previous)


def test_the_kubernetes_actuator_says_a_shrink_of_a_job_already_smaller_wrote_nothing(
        kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(job("train", "ml", parallelism=2))   # its owner shrank it 4 -> 2 since the plan saw 4 run
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    result = actuator.apply(shrink(3, 4), SNAP)
    assert result.outcome is Outcome.APPLIED and "(already)" in result.detail and result.unchanged
    result = actuator.apply(shrink(1, 2), SNAP)   # this one writes
    assert result.outcome is Outcome.APPLIED and not result.unchanged
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 1


def test_the_dry_run_actuator_says_it_wrote_nothing() -> None:
    result = DryRunActuator().apply(shrink(), SNAP)
    assert result.outcome is Outcome.DRY_RUN and result.unchanged


def test_acknowledge_remembers_only_the_shrinks_that_wrote() -> None:
    snap = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
    unwritten, written = shrink(3, 4, "ml/a"), shrink(2, 4, "ml/b")
    state = acknowledge(PlannerState(), [unwritten, written], snap, unchanged=[unwritten])
    assert dict(state.shrunk) == {"ml/b": 4}
    assert dict(acknowledge(PlannerState(), [unwritten, written], snap).shrunk) == {"ml/a": 4, "ml/b": 4}


def test_acknowledge_does_not_hold_a_job_for_a_colocation_shrink_that_wrote_nothing(
        kube: FakeKube, api, clock, sleeps) -> None:
    """Co-location's shrink of a Job its owner shrank as far since the plan's view wrote nothing; co-location
    remembered it all the same: the job held as co-location's, its workers counted owed."""
    kube.add(job("train", "ml", parallelism=2))
    co = ScaleTraining(reason="test", job="ml/train", workers=3, previous_workers=4, cause="colocation_slo",
                       service="svc")
    result = KubernetesActuator(api, sleep=sleeps.append, clock=clock).apply(co, SNAP)
    assert result.outcome is Outcome.APPLIED and result.unchanged
    state = acknowledge(PlannerState(), [co], SNAP, unchanged=[co])
    assert dict(state.colocation.shrunk) == {} and dict(state.shrunk) == {}
    assert dict(acknowledge(PlannerState(), [co], SNAP).colocation.shrunk) == {"ml/train": (4, "svc")}


def test_the_loop_does_not_remember_a_shrink_the_kubernetes_actuator_did_not_write(
        kube: FakeKube, api, clock, sleeps) -> None:
    """Driven through the loop: job `job` (4 workers) fills a node whose cooling fails; its owner shrinks it to 2
    just before gputide's shrink reaches the API server, which then writes nothing."""
    fl = fleet_mod.build("t", [Node(name=f"n{i}", gpu_model="A100-SXM4-80GB", gpu_count=4) for i in range(2)])
    sim = SimCluster(fl, seed=0, step_s=60.0)
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_max=4))
    sim.add_service(ServiceSpec(name="svc", replicas=4))
    sim.degrade_cooling(fl.gpus[sim.placements[f"{NS}/job-w0"][0]].node, inlet_rise_c=30, resistance_factor=2.0)
    kube.add(job("job", NS, parallelism=4))
    actuator = JobOnKube(sim, kube, KubernetesActuator(api, sleep=sleeps.append, clock=clock), owner=2)
    rec = Reconciler(source=SimTelemetrySource(sim), actuator=actuator, clock=lambda: sim.time)
    for _ in range(12):
        sim.step()
        report = rec.run_once()
        if actuator.sizes:
            break
    assert actuator.sizes == [2], "the hot job's shrink never reached the API server"
    assert any("(already)" in r.detail and r.unchanged for r in report.results)
    assert "job" not in rec.state.shrunk
