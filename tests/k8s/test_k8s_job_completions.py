"""Resizing Jobs that run to a number of completions, against the fake API server's Job validation.

The Job controller runs at most `completions - succeeded` pods whatever the parallelism, so raising parallelism
beyond that lends GPUs (and Kueue quota) to workers that never start. An Indexed Job with completions ==
parallelism (one index per rank) is an Elastic Indexed Job: it is resized by changing both together, the only
completions change the API server accepts.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import ApiError, FakeKube, clusterqueue, job

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_jobs import worker_limit
from balancer.actuate.k8s_workloads import suspended_job
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def train(parallelism: int = 4, *, completions: int | None = None, indexed: bool = False, succeeded: int = 0,
          suspend: bool = False, queue: str | None = None) -> dict:
    j = job("train", "ml", parallelism=parallelism, gpus=2, completions=completions, indexed=indexed, queue=queue,
            suspend=suspend)
    if succeeded:
        j["status"] = {"succeeded": succeeded}
    return j


def scale(actuator: KubernetesActuator, workers: int, previous: int = 4):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          SNAP)


def size(kube: FakeKube) -> tuple[int, int | None]:
    spec = kube.get("jobs", "train", "ml")["spec"]
    return spec["parallelism"], spec.get("completions")


@pytest.mark.parametrize(
    ("shape", "workers", "expected"),
    [
        pytest.param({}, 6, (6, None), id="a Job without completions grows by parallelism"),
        pytest.param({"completions": 4, "indexed": True}, 6, (6, 6),
                     id="an Elastic Indexed Job grows by completions and parallelism together"),
        pytest.param({"completions": 4, "indexed": True}, 2, (2, 2),
                     id="an Elastic Indexed Job shrinks by completions and parallelism together"),
        pytest.param({"completions": 100, "indexed": True}, 6, (6, 100),
                     id="an Indexed Job with more indexes than workers grows by parallelism, its indexes kept"),
        pytest.param({"completions": 8, "succeeded": 3}, 5, (5, 8),
                     id="a NonIndexed Job grows by parallelism up to completions - succeeded"),
        pytest.param({"completions": 4}, 2, (2, 4), id="a NonIndexed Job with completions shrinks by parallelism"),
    ],
)
def test_a_job_is_resized_the_way_its_completions_allow(kube: FakeKube, actuator, shape, workers, expected) -> None:
    kube.add(train(**shape))
    result = scale(actuator, workers)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert size(kube) == expected


@pytest.mark.parametrize(
    ("shape", "workers", "limit"),
    [
        pytest.param({"completions": 4}, 6, 4, id="a NonIndexed Job does not grow beyond its completions"),
        pytest.param({"completions": 8, "succeeded": 3}, 6, 5,
                     id="nor beyond the completions still outstanding"),
        pytest.param({"completions": 5, "indexed": True, "succeeded": 2}, 6, 3,
                     id="nor does an Indexed Job whose completions are not its parallelism"),
    ],
)
def test_a_job_is_not_grown_beyond_the_workers_it_can_run(kube: FakeKube, actuator, shape, workers, limit) -> None:
    kube.add(train(**shape))
    result = scale(actuator, workers)
    assert result.outcome is Outcome.FAILED
    assert "job ml/train" in result.detail and f"at most {limit} workers, not {workers}" in result.detail
    assert size(kube) == (4, shape["completions"]) and not kube.calls("PATCH", r"/jobs/")


def test_a_refused_grow_moves_no_kueue_quota(kube: FakeKube, api, sleeps) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))
    kube.add(train(completions=4, queue="training-lq"))
    actuator = KubernetesActuator(api, sleep=sleeps.append, kueue_queues=("inference", "training"))
    result = scale(actuator, 6)
    assert result.outcome is Outcome.FAILED and "at most 4 workers" in result.detail
    assert not kube.calls("PATCH", r"/(clusterqueues|jobs)/")


def test_a_stopped_elastic_indexed_job_keeps_its_indexes_and_resumes_with_new_ones(kube: FakeKube, actuator) -> None:
    kube.add(train(completions=4, indexed=True))
    assert scale(actuator, 0).outcome is Outcome.APPLIED
    assert size(kube) == (4, 4)   # not completions 0, which would finish it
    assert kube.get("jobs", "train", "ml")["spec"]["suspend"] is True
    assert scale(actuator, 6, previous=0).outcome is Outcome.APPLIED
    assert size(kube) == (6, 6) and kube.get("jobs", "train", "ml")["spec"]["suspend"] is False


# ---- the fake API server refuses what the real one refuses --------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "patch", "message"),
    [
        pytest.param({"completions": 4}, {"completions": 6, "parallelism": 6}, "spec.completions: field is immutable",
                     id="a NonIndexed Job's completions are immutable"),
        pytest.param({"completions": 4, "indexed": True}, {"completions": 6},
                     "can only be modified in tandem with spec.parallelism",
                     id="an Indexed Job's completions change only with its parallelism"),
        pytest.param({"completions": 4, "indexed": True}, {"completionMode": "NonIndexed"},
                     "completionMode: field is immutable", id="the completion mode is immutable"),
    ],
)
def test_the_fake_refuses_the_completions_changes_the_api_server_refuses(kube: FakeKube, shape, patch,
                                                                         message) -> None:
    kube.add(train(**shape))
    with pytest.raises(ApiError, match=message):
        kube.mutate("jobs", "train", "ml", {"spec": patch})
    assert size(kube) == (4, 4)
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 2}})   # parallelism alone is always allowed


def test_the_fake_wants_completions_on_an_indexed_job(kube: FakeKube) -> None:
    with pytest.raises(ApiError, match="when completion mode is Indexed"):
        kube.add(train(indexed=True))


# ---- what the controller learns of a suspended Job ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("shape", "limit", "bounds"),
    [
        pytest.param({}, None, (2, 8), id="no completions: the annotations' bounds"),
        pytest.param({"completions": 4, "indexed": True}, None, (2, 8), id="an Elastic Indexed Job: unbounded"),
        pytest.param({"completions": 6, "succeeded": 2}, 4, (2, 4),
                     id="a NonIndexed Job: at most the completions still outstanding"),
        pytest.param({"completions": 3, "succeeded": 2}, 1, (1, 1), id="its minimum capped too"),
    ],
)
def test_a_suspended_jobs_elastic_max_is_what_it_can_run(shape, limit, bounds) -> None:
    j = train(suspend=True, **shape)
    j["spec"]["template"]["metadata"] = {"annotations": {"gputide.io/elastic-min": "2",
                                                         "gputide.io/elastic-max": "8"}}
    assert worker_limit(j) == limit
    got = suspended_job(j)
    assert got is not None and (got.elastic_min, got.elastic_max) == bounds
