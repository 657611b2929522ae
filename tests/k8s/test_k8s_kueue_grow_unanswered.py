"""The quota lent ahead of a grow whose Job patch got no answer is kept when the patch landed. It was given back
whatever the outcome: the action's retry then found the Job already grown and moved nothing, and the Job asked for
more GPUs than its ClusterQueue held for good. The Job is now read back first: grown, the quota stays."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube
from test_k8s_kueue_label_running import elastic as running_job
from test_k8s_kueue_stop import gpus
from test_k8s_unknown_outcome import no_answer

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def grow(actuator: KubernetesActuator):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=6, previous_workers=4), SNAP)


@pytest.fixture
def elastic(kube: FakeKube) -> FakeKube:
    """ml/train at 4 workers of 2 GPUs, admitted, resized in place by Kueue (elastic-job)."""
    return running_job(kube)


def test_a_grow_that_landed_unanswered_keeps_its_quota(elastic: FakeKube, actuator) -> None:
    batch = actuator.api.batch
    real = batch.patch_namespaced_job
    batch.patch_namespaced_job = no_answer(real, lambda: elastic.mutate("jobs", "train", "ml",
                                                                        {"spec": {"parallelism": 6}}))
    result = grow(actuator)
    assert result.outcome is Outcome.RETRY and result.maybe_applied
    assert elastic.get("jobs", "train", "ml")["spec"]["parallelism"] == 6 and gpus(elastic) == (12, 12)
    batch.patch_namespaced_job = real
    assert grow(actuator).outcome is Outcome.APPLIED   # the retry: nothing more to move
    assert gpus(elastic) == (12, 12)


def test_a_grow_unanswered_that_did_not_land_gives_its_quota_back(elastic: FakeKube, actuator) -> None:
    batch = actuator.api.batch
    batch.patch_namespaced_job = no_answer(batch.patch_namespaced_job)
    result = grow(actuator)
    assert result.outcome is Outcome.RETRY and result.maybe_applied
    assert elastic.get("jobs", "train", "ml")["spec"]["parallelism"] == 4 and gpus(elastic) == (16, 8)


def test_a_grow_refused_gives_its_quota_back_without_reading_the_job_again(elastic: FakeKube, actuator) -> None:
    elastic.inject("PATCH", r"/jobs/train$", 422)
    reads = len(elastic.calls("GET", r"/jobs/train$"))
    assert grow(actuator).outcome is Outcome.FAILED
    assert gpus(elastic) == (16, 8) and len(elastic.calls("GET", r"/jobs/train$")) == reads + 1
