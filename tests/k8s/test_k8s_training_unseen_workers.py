"""A training Job's resize never stops running workers the plan did not mean to stop. The planners count a Job's
running pods (`ScaleTraining.previous_workers`: those the telemetry places on GPUs) and the safety guard charges its
disruption budget with the running workers the resize takes below that count; the actuator wrote the target size
whatever the Job ran now. A plan made from a view that lagged (the Job's pods on a node whose telemetry came in
late or never, the Job grown by its owner since the snapshot, its new pods started since) then stopped more running
workers than the planner meant and the guard counted: planner saw 4 running, shrink to 2, the Job runs 8 ->
parallelism 2, 6 workers killed for 2 counted.

16a2b3d refused such a resize as stale (RETRY 409); a Job whose unseen workers no later view counts (a node without
an exporter) was then refused every cycle, reclaims included. Now the size written stops exactly the running workers
the plan meant (8 - (4 - 2) = 6), and the Kueue quota given back is that of the workers removed. A Job that asks for
more workers than run (pending workers, which a Job's controller deletes first) is the legitimate difference and is
resized as before; so is any resize that stops no running worker beyond the plan's count (a grow, a Job already at
the size)."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, clusterqueue, job

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
UID_LABEL = "batch.kubernetes.io/controller-uid"


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def add_job(kube: FakeKube, parallelism: int, running: int, pending: int = 0, terminating: int = 0,
            queue: str | None = None, indexed: bool = False, pending_first: bool = False) -> None:
    """A Job as the API server and the Job controller keep it: its selector defaulted to its uid, its pods labelled
    with it and controlled by it, `running` Running, `pending` Pending, `terminating` Running and being deleted
    (`indexed`: an Elastic Indexed Job, its pods' indexes in that order, `pending_first` or last)."""
    spec = {"completions": parallelism, "indexed": True} if indexed else {}
    uid = kube.add(job("train", "ml", parallelism=parallelism, gpus=2, queue=queue, **spec))["metadata"]["uid"]
    kube.mutate("jobs", "train", "ml", {"spec": {"selector": {"matchLabels": {UID_LABEL: uid}}}})
    phases = ["Running"] * running + ["Terminating"] * terminating
    phases = ["Pending"] * pending + phases if pending_first else phases + ["Pending"] * pending
    for i, phase in enumerate(phases):
        meta = {"name": f"train-{i}", "namespace": "ml",
                "labels": {UID_LABEL: uid, "batch.kubernetes.io/job-name": "train"},
                "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "train", "uid": uid,
                                     "controller": True}]}
        if phase == "Terminating":
            meta["deletionTimestamp"] = "2024-01-01T00:00:00Z"
        if indexed:
            meta["annotations"] = {"batch.kubernetes.io/job-completion-index": str(i)}
        kube.add({"apiVersion": "v1", "kind": "Pod", "metadata": meta,
                  "spec": {"containers": [{"name": "train", "image": "registry.example/train:1"}]},
                  "status": {"phase": "Pending" if phase == "Pending" else "Running"}})


def scale(actuator: KubernetesActuator, workers: int, previous: int):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          SNAP)


def parallelism(kube: FakeKube) -> int:
    return kube.get("jobs", "train", "ml")["spec"]["parallelism"]


@pytest.mark.parametrize(
    ("size", "running", "workers", "previous", "expected"),
    [
        pytest.param(8, 8, 2, 4, 6, id="the plan saw 4 running and shrinks to 2, the Job runs 8: 2 stop, not 6"),
        pytest.param(6, 5, 2, 4, 3, id="one worker more than the plan saw, the rest pending: 2 running stop"),
    ],
)
def test_a_resize_stops_no_more_running_workers_than_the_plan_meant(
        kube: FakeKube, actuator, size, running, workers, previous, expected) -> None:
    add_job(kube, size, running, pending=size - running)
    result = scale(actuator, workers, previous)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert parallelism(kube) == expected
    assert f"runs {running} workers, more than the {previous} the plan saw: resized to {expected}" in result.detail
    assert not kube.get("jobs", "train", "ml")["spec"].get("suspend")


def test_a_grow_of_a_job_running_more_than_its_target_writes_nothing(kube: FakeKube, actuator) -> None:
    add_job(kube, 8, 8)   # the plan saw 4 and grows to 6: writing 6 would stop 2 where it meant none
    result = scale(actuator, 6, 4)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert "left as it is (already)" in result.detail and "left at 8, not 6" in result.detail
    assert parallelism(kube) == 8
    assert kube.calls("PATCH", r"/jobs/train$") == []


def test_an_elastic_indexed_job_is_cut_by_the_indexes_its_controller_stops(kube: FakeKube, actuator) -> None:
    # indexes 0-1 pending, 2-7 running; the plan saw 4 and shrinks to 2: the controller stops the indexes from the
    # new size up whatever their phase, so 4 would stop 4 running (4-7); 6 stops 2 (6, 7), as the plan meant
    add_job(kube, 8, 6, pending=2, indexed=True, pending_first=True)
    result = scale(actuator, 2, 4)
    assert result.outcome is Outcome.APPLIED, result.detail
    spec = kube.get("jobs", "train", "ml")["spec"]
    assert (spec["parallelism"], spec["completions"]) == (6, 6)


@pytest.mark.parametrize(
    ("size", "running", "pending", "terminating", "workers", "previous", "expected"),
    [
        pytest.param(6, 4, 2, 0, 2, 4, 2, id="pending workers beyond the 4 the plan saw: shrunk to 2"),
        pytest.param(8, 4, 4, 0, 6, 4, 6, id="grown to 8 by its owner, 4 of them pending: the plan's 6 stops none"),
        pytest.param(4, 4, 0, 4, 2, 4, 2, id="pods being deleted already are not counted"),
        pytest.param(4, 4, 0, 0, 2, 4, 2, id="the Job runs what the plan saw"),
        pytest.param(4, 2, 2, 0, 6, 4, 6, id="a grow of a Job running fewer than the plan saw"),
    ],
)
def test_a_resize_that_stops_no_running_worker_beyond_the_plans_count_is_written(
        kube: FakeKube, actuator, size, running, pending, terminating, workers, previous, expected) -> None:
    add_job(kube, size, running, pending=pending, terminating=terminating)
    result = scale(actuator, workers, previous)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert parallelism(kube) == expected


def test_the_pods_of_another_job_under_the_selector_are_not_counted(kube: FakeKube, actuator) -> None:
    add_job(kube, 8, 4, pending=4)
    uid = kube.get("jobs", "train", "ml")["metadata"]["uid"]
    for i in range(4):   # a broader selector (manualSelector) matches pods another controller owns
        kube.add({"apiVersion": "v1", "kind": "Pod",
                  "metadata": {"name": f"other-{i}", "namespace": "ml", "labels": {UID_LABEL: uid},
                               "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "other",
                                                    "uid": "another-uid", "controller": True}]},
                  "spec": {"containers": [{"name": "x", "image": "registry.example/x:1"}]},
                  "status": {"phase": "Running"}})
    result = scale(actuator, 2, 4)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert parallelism(kube) == 2


def test_a_job_asking_for_no_more_than_the_plan_saw_is_resized_without_listing_its_pods(
        kube: FakeKube, actuator) -> None:
    add_job(kube, 4, 4)
    assert scale(actuator, 2, 4).outcome is Outcome.APPLIED
    assert kube.calls("GET", r"/pods") == []


def quota(kube: FakeKube) -> tuple[int, int]:
    return tuple(kube.get("clusterqueues", q)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"]
                 for q in ("inference", "training"))


def test_a_queued_job_gives_back_the_quota_of_the_workers_it_stops(kube: FakeKube, actuator) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 16))
    add_job(kube, 8, 8, queue="training-lq")
    result = scale(actuator, 2, 4)   # written 6: 2 workers of 2 GPUs removed, 4 GPUs back
    assert result.outcome is Outcome.APPLIED, result.detail
    assert parallelism(kube) == 6
    assert quota(kube) == (20, 12)


def test_a_failed_read_of_its_pods_resizes_nothing(kube: FakeKube, actuator) -> None:
    add_job(kube, 8, 4, pending=4)
    kube.inject("GET", r"/namespaces/ml/pods", 403)
    result = scale(actuator, 2, 4)
    assert result.outcome is Outcome.FAILED and result.code == "403", result.detail
    assert parallelism(kube) == 8
