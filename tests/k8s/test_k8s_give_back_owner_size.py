"""A hotspot's give-back never grows a Job above the size it had before gputide shrank it.

The reconcile loop acknowledges an applied hotspot shrink to the planner, which remembers the workers before it
(`PlannerState.shrunk`) beside the Job's own record (`gputide.io/shrunk`). The shrink is planned from a view that can
lag the Job's owner: the owner shrank the Job 4 -> 2 after the snapshot, the plan shrinks 4 -> 3, and the Kubernetes
actuator writes nothing ("(already)": a shrink never raises a Job, `k8s_jobs.raises`). The planner remembered the
shrink all the same (4, the plan's view), and once the GPU cooled its give-back wrote parallelism 4 over the owner's
2. Likewise a shrink planned 4 -> 2 of a Job its owner had set to 3 recorded `{"from": 4}` (the plan's running
count), so the give-back wrote 4 over the owner's 3.

Now the record says what the Job asked for (or an earlier valid record's "from"), a give-back grows a Job no further
than its valid record says and writes nothing without one, and the planner forgets a shrink once its give-back is
applied. The first test is driven through the loop: the simulator is the telemetry and runs every action but the
Job's resizes, which the Kubernetes actuator makes on the (fake) API server; the simulator then follows the Job."""

from __future__ import annotations

import json

from fakeapi import FakeKube, job

from balancer import fleet as fleet_mod
from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_jobs import COLOCATION_ANNOTATION, SHRUNK_ANNOTATION
from balancer.actuate.sim import SimActuator
from balancer.config import BalancerPolicy
from balancer.loop import Reconciler
from balancer.model import Node, ScaleTraining
from balancer.sim import ServiceSpec, SimCluster, TrainingJobSpec
from balancer.telemetry.sim import SimTelemetrySource
from tests.k8s.test_k8s_shrink_record import SNAP

NS = "training"   # the simulator's training namespace: the actuator finds the Job by its pods'


class JobOnKube:
    """The simulator's actuator, except for the Job's resizes: those go to the Kubernetes actuator, and the simulator
    then takes the Job's size and record as the API server has them. `owner` (workers) is the size the Job's owner
    sets just before gputide's first shrink reaches the API server (after the plan's and the fresh snapshot)."""

    def __init__(self, sim: SimCluster, kube: FakeKube, k8s: KubernetesActuator, owner: int) -> None:
        self.sim, self.kube, self.k8s, self.owner = sim, kube, k8s, owner
        self.inner, self.name = SimActuator(sim), "kubernetes"
        self.sizes: list[int] = []   # the Job's parallelism after each of its resizes

    def apply(self, action, snapshot):
        if not isinstance(action, ScaleTraining):
            return self.inner.apply(action, snapshot)
        if self.owner:
            self.kube.mutate("jobs", "job", NS, {"spec": {"parallelism": self.owner}})
            self.sim.scale_training("job", self.owner)
            self.owner = 0
        result = self.k8s.apply(action, snapshot)
        spec, note = self.job()
        self.sim.scale_training("job", spec, shrunk_from=note.get("from", 0))
        self.sizes.append(spec)
        return result

    def job(self) -> tuple[int, dict]:
        obj = self.kube.get("jobs", "job", NS)
        note = (obj["metadata"].get("annotations") or {}).get(SHRUNK_ANNOTATION)
        return obj["spec"]["parallelism"], json.loads(note) if note else {}


def run(kube: FakeKube, api, clock, sleeps, owner: int) -> tuple[JobOnKube, Reconciler]:
    """Job `job` (4 workers, elastic 1..4) fills node n0, whose cooling fails so badly that throttling cannot cool
    it: the planner shrinks the job, whose owner sets it to `owner` workers just before; then n0 cools."""
    fl = fleet_mod.build("t", [Node(name=f"n{i}", gpu_model="A100-SXM4-80GB", gpu_count=4) for i in range(2)])
    sim = SimCluster(fl, seed=0, step_s=60.0)
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_max=4))
    sim.add_service(ServiceSpec(name="svc", replicas=4))
    node = fl.gpus[sim.placements[f"{NS}/job-w0"][0]].node
    sim.degrade_cooling(node, inlet_rise_c=30, resistance_factor=2.0)
    kube.add(job("job", NS, parallelism=4))
    actuator = JobOnKube(sim, kube, KubernetesActuator(api, sleep=sleeps.append, clock=clock), owner)
    rec = Reconciler(source=SimTelemetrySource(sim), actuator=actuator, clock=lambda: sim.time)
    for _ in range(12):
        sim.step()
        rec.run_once()
        if actuator.sizes:
            break
    assert actuator.sizes, "the hot job was never shrunk"
    sim.restore_cooling(node)
    for _ in range(4 * BalancerPolicy().hotspots.cool_readings + 20):
        sim.step()
        rec.run_once()
    return actuator, rec


def test_a_shrink_that_found_the_job_already_smaller_is_never_given_back_over_its_owners_size(
        kube: FakeKube, api, clock, sleeps) -> None:
    actuator, rec = run(kube, api, clock, sleeps, owner=2)
    assert max(actuator.sizes) == 2 and actuator.job() == (2, {})
    assert "job" not in rec.state.shrunk


def scale(kube_actuator: KubernetesActuator, workers: int, previous: int, shrunk_from: int):
    result = kube_actuator.apply(ScaleTraining(reason="test", job="ml/train", workers=workers,
                                               previous_workers=previous, shrunk_from=shrunk_from), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    return result


def train(kube: FakeKube) -> tuple[int, dict]:
    obj = kube.get("jobs", "train", "ml")
    note = (obj["metadata"].get("annotations") or {}).get(SHRUNK_ANNOTATION)
    return obj["spec"]["parallelism"], json.loads(note) if note else {}


def test_a_shrink_from_a_view_older_than_its_owners_records_and_gives_back_the_owners_size(
        kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(job("train", "ml", parallelism=3))   # its owner shrank it 4 -> 3 since the plan saw 4 run
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    scale(actuator, 2, 4, shrunk_from=4)
    assert train(kube) == (2, {"from": 3, "to": 2})
    result = scale(actuator, 4, 2, shrunk_from=0)   # a give-back from the planner's memory of the plan's 4
    assert train(kube) == (3, {}) and "not 4" in result.detail


def test_a_give_back_to_a_job_without_a_record_of_gputides_shrink_writes_nothing(
        kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(job("train", "ml", parallelism=2))
    result = scale(KubernetesActuator(api, sleep=sleeps.append, clock=clock), 4, 2, shrunk_from=0)
    assert "(already)" in result.detail and train(kube) == (2, {})
    assert kube.calls("PATCH", r"/jobs/train$") == []


def colocation(kube: FakeKube) -> dict:
    note = (kube.get("jobs", "train", "ml")["metadata"].get("annotations") or {}).get(COLOCATION_ANNOTATION)
    return json.loads(note) if note else {}


def resize(kube_actuator: KubernetesActuator, workers: int, previous: int, cause: str, service: str = ""):
    result = kube_actuator.apply(ScaleTraining(reason="test", job="ml/train", workers=workers,
                                               previous_workers=previous, cause=cause, service=service), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    return result


def test_colocations_shrink_and_give_back_keep_to_the_owners_size(kube: FakeKube, api, clock, sleeps) -> None:
    """Co-location shrinks by one worker per service it makes room for: 4 -> 2 for two, planned from a view older
    than the owner's 4 -> 3, recorded "from" 4 and gave back 4."""
    kube.add(job("train", "ml", parallelism=3))
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    resize(actuator, 2, 4, "colocation_slo", "a,b")
    assert train(kube)[0] == 2 and colocation(kube) == {"from": 3, "to": 2, "service": "a,b"}
    resize(actuator, 4, 2, "colocation_slack")   # co-location's memory: the plan's 4
    assert train(kube)[0] == 3 and colocation(kube) == {}


def test_colocations_give_back_to_a_job_without_its_record_writes_nothing(kube: FakeKube, api, clock,
                                                                           sleeps) -> None:
    """Co-location's shrink found the Job already smaller (its owner's 4 -> 2) and wrote nothing; co-location
    remembered 4 all the same, and its give-back grew the Job to 4."""
    kube.add(job("train", "ml", parallelism=2))
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    assert "(already)" in resize(actuator, 3, 4, "colocation_slo", "svc").detail
    assert "(already)" in resize(actuator, 4, 2, "colocation_slack").detail
    assert train(kube)[0] == 2 and kube.calls("PATCH", r"/jobs/train$") == []
