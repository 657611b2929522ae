"""The Kueue quota a training Job's resize moves is the change of the Job's own size, not of the plan's. It was
per-worker GPUs x (workers - the action's previous_workers), the running workers of the snapshot the plan read: a
Job resized since (by gputide's own last action whose pods are not up yet, or by someone else) moved quota no Job
asks for, and each cycle the ClusterQueues drifted further from the Jobs they admit. It is now from the Job as read
before the change: its parallelism, capped by what can still run (completions - succeeded), 0 once gputide
stopped it."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, clusterqueue, job

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def quota(kube: FakeKube) -> tuple[int, int]:
    return tuple(kube.get("clusterqueues", q)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"]
                 for q in ("inference", "training"))


def scale(actuator: KubernetesActuator, workers: int, previous: int):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          SNAP)


@pytest.fixture
def cohort(kube: FakeKube) -> FakeKube:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))
    return kube


@pytest.mark.parametrize(
    ("parallelism", "workers", "previous", "expected"),
    [
        pytest.param(6, 8, 4, (12, 12), id="grown to 6 by someone else, the plan saw 4: 2 workers' quota, not 4"),
        pytest.param(4, 2, 6, (20, 4), id="the plan saw 6, the Job asks for 4: shrinking to 2 gives back 2 workers'"),
        pytest.param(8, 6, 4, (20, 4), id="the plan grows 4 -> 6 a Job someone grew to 8: quota goes back, not out"),
    ],
)
def test_quota_follows_the_jobs_own_size_not_the_plans(cohort: FakeKube, actuator, parallelism, workers, previous,
                                                       expected) -> None:
    cohort.add(job("train", "ml", parallelism=parallelism, gpus=2, queue="training-lq"))
    result = scale(actuator, workers, previous)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert quota(cohort) == expected
    assert f"quota moved for the {parallelism} workers the Job asks for, not the {previous}" in result.detail


def test_a_grow_planned_again_from_a_snapshot_that_lags_it_moves_no_more_quota(cohort: FakeKube, actuator) -> None:
    cohort.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    assert scale(actuator, 6, 4).outcome is Outcome.APPLIED
    assert quota(cohort) == (12, 12)
    result = scale(actuator, 6, 4)   # the new pods not up yet: the next plan still saw 4
    assert result.outcome is Outcome.APPLIED, result.detail
    assert quota(cohort) == (12, 12) and "kueue quota" not in result.detail


def test_a_job_with_fewer_completions_left_than_its_parallelism_gives_back_what_it_ran(cohort: FakeKube,
                                                                                       actuator) -> None:
    """10 completions, 7 succeeded: the Job runs 3 pods whatever its parallelism of 4, and Kueue counts 3."""
    cohort.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq", completions=10))
    cohort.mutate("jobs", "train", "ml", {"status": {"succeeded": 7}})
    assert scale(actuator, 2, 4).outcome is Outcome.APPLIED
    assert quota(cohort) == (18, 6)
