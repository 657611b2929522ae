"""The simulator's actuator keeps a training job's shrink records and give-backs as the Kubernetes actuator does.

22472b8 and 1937213 made the Kubernetes actuator record a shrink's "from" as what the Job asked for (or an earlier
valid record's "from"), never the plan's running count, and grow a Job on a give-back no further than its valid
record says (nothing without one). The simulator still recorded the larger of the plan's count and the job's size
and gave back whatever the plan asked: with the owner's 4 -> 3 after the plan saw 4 run, a shrink to 2 recorded
"from" 4 (Kubernetes: 3) and the give-back grew the job to 4 (Kubernetes: 3), so a simulated run showed a give-back
over the owner's size that a real cluster does not make."""

from __future__ import annotations

import json

from fakeapi import FakeKube, job

from balancer import fleet as fleet_mod
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_jobs import COLOCATION_ANNOTATION, SHRUNK_ANNOTATION
from balancer.actuate.sim import SimActuator
from balancer.model import Node, ScaleTraining
from balancer.sim import SimCluster, TrainingJobSpec
from tests.k8s.test_k8s_shrink_record import SNAP


def sim_at(size: int) -> tuple[SimCluster, SimActuator]:
    """Job `job` (4 workers, elastic 1..4) whose owner set it to `size` since the plan saw 4 run."""
    sim = SimCluster(fleet_mod.build("t", [Node(name="n0", gpu_model="A100-SXM4-80GB", gpu_count=8)]), seed=0)
    sim.add_training_job(TrainingJobSpec(name="job", workers=4, elastic_max=4))
    sim.scale_training("job", size)
    return sim, SimActuator(sim)


def both(kube: FakeKube, api, clock, sleeps, size: int, *actions: ScaleTraining) -> tuple[list, list]:
    """Each action applied to the simulated job and to a Kubernetes Job of the same size: (sizes, records) of each."""
    sim, sim_actuator = sim_at(size)
    kube.add(job("train", "ml", parallelism=size))
    k8s = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    seen_sim, seen_k8s = [], []
    for a in actions:
        sim_actuator.apply(a, SNAP)
        k8s.apply(ScaleTraining(**{**a.__dict__, "job": "ml/train"}), SNAP)
        i = sim._job_index("job")
        co = sim.colocation_records.get(i)
        seen_sim.append((sim._job_target[i], sim.shrink_records.get(i, (0,))[0], co.before if co else 0))
        obj = kube.get("jobs", "train", "ml")
        notes = obj["metadata"].get("annotations") or {}
        seen_k8s.append((obj["spec"]["parallelism"],
                         *(json.loads(notes[k])["from"] if notes.get(k) else 0
                           for k in (SHRUNK_ANNOTATION, COLOCATION_ANNOTATION))))
    return seen_sim, seen_k8s


def scale(workers: int, previous: int, **kw) -> ScaleTraining:
    return ScaleTraining(reason="test", job="job", workers=workers, previous_workers=previous, **kw)


def test_a_hotspot_shrink_and_its_give_back_keep_to_the_owners_size_as_on_kubernetes(
        kube: FakeKube, api, clock, sleeps) -> None:
    seen_sim, seen_k8s = both(kube, api, clock, sleeps, 3, scale(2, 4, shrunk_from=4), scale(4, 2, shrunk_from=0))
    assert seen_k8s == [(2, 3, 0), (3, 0, 0)]
    assert seen_sim == seen_k8s


def test_a_colocation_shrink_and_its_give_back_keep_to_the_owners_size_as_on_kubernetes(
        kube: FakeKube, api, clock, sleeps) -> None:
    seen_sim, seen_k8s = both(kube, api, clock, sleeps, 3, scale(2, 4, cause="colocation_slo", service="a,b"),
                              scale(4, 2, cause="colocation_slack"))
    assert seen_k8s == [(2, 0, 3), (3, 0, 0)]
    assert seen_sim == seen_k8s


def test_a_give_back_without_a_record_leaves_the_job_as_on_kubernetes(kube: FakeKube, api, clock, sleeps) -> None:
    seen_sim, seen_k8s = both(kube, api, clock, sleeps, 2, scale(4, 2, shrunk_from=0),
                              scale(4, 2, cause="colocation_slack"))
    assert seen_k8s == [(2, 0, 0), (2, 0, 0)]
    assert seen_sim == seen_k8s


def test_a_shrink_of_a_job_already_smaller_leaves_it_as_on_kubernetes(kube: FakeKube, api, clock, sleeps) -> None:
    """The owner's 4 -> 2 after the plan saw 4 run: the plan's shrink to 3 would raise the job, and Kubernetes
    writes nothing ("(already)"); the simulator grew the job to 3 and recorded the shrink."""
    seen_sim, seen_k8s = both(kube, api, clock, sleeps, 2, scale(3, 4, shrunk_from=4),
                              scale(3, 4, cause="colocation_slo", service="svc"))
    assert seen_k8s == [(2, 0, 0), (2, 0, 0)]
    assert seen_sim == seen_k8s


def test_a_shrink_to_the_size_its_owner_set_leaves_the_job_as_on_kubernetes(kube: FakeKube, api, clock,
                                                                              sleeps) -> None:
    """The owner's 4 -> 3, the plan's 4 -> 3: nothing to write; the simulator recorded a hotspot shrink from 4."""
    seen_sim, seen_k8s = both(kube, api, clock, sleeps, 3, scale(3, 4, shrunk_from=4))
    assert seen_k8s == [(3, 0, 0)]
    assert seen_sim == seen_k8s


def test_the_simulators_result_says_a_resize_wrote_nothing_as_the_kubernetes_actuators_does(
        kube: FakeKube, api, clock, sleeps) -> None:
    """A shrink that found the job already smaller wrote nothing: both results are `unchanged`, so the loop's
    planner remembers no shrink for it (ac0c927) in a simulated run as on a cluster; one that wrote is not."""
    sim, sim_actuator = sim_at(2)
    kube.add(job("train", "ml", parallelism=2))
    k8s = KubernetesActuator(api, sleep=sleeps.append, clock=clock)
    stale = scale(3, 4, shrunk_from=4)   # planned from the view where 4 ran
    assert sim_actuator.apply(stale, SNAP).unchanged
    assert k8s.apply(ScaleTraining(**{**stale.__dict__, "job": "ml/train"}), SNAP).unchanged
    wrote = scale(1, 2, shrunk_from=2)
    assert not sim_actuator.apply(wrote, SNAP).unchanged
    assert not k8s.apply(ScaleTraining(**{**wrote.__dict__, "job": "ml/train"}), SNAP).unchanged
