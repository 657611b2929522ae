"""A plain Job someone else suspended (an operator's `kubectl patch ... suspend: true`, a pipeline's pause: no
`gputide.io/suspended` label) is never unsuspended by a resize. The planner sizes it from a snapshot taken while it
still ran; writing `spec.suspend: false` with the new size restarted a Job its owner had paused."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, job

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.kubernetes import SUSPENDED_LABEL
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def resize(actuator: KubernetesActuator, workers: int, previous: int = 4):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          SNAP)


@pytest.mark.parametrize("workers", [0, 2, 6])   # a stop would label it: a later cycle resumed it
def test_a_job_suspended_by_someone_else_stays_suspended_and_unchanged(kube: FakeKube, api, clock, sleeps,
                                                                       workers) -> None:
    kube.add(job("train", "ml", parallelism=4, suspend=True))
    result = resize(KubernetesActuator(api, sleep=sleeps.append, clock=clock), workers)
    assert result.outcome is Outcome.FAILED and "suspended" in result.detail
    stored = kube.get("jobs", "train", "ml")
    assert (stored["spec"]["suspend"], stored["spec"]["parallelism"]) == (True, 4)
    assert SUSPENDED_LABEL not in stored["metadata"]["labels"]


def test_a_job_gputide_suspended_is_still_resumed(kube: FakeKube, api, clock, sleeps) -> None:
    stored = job("train", "ml", parallelism=4, suspend=True)
    stored["metadata"]["labels"][SUSPENDED_LABEL] = "true"
    kube.add(stored)
    # resumed as the planner plans it: a suspended Job runs no worker (a shrink of it from a stale view writes
    # nothing, tests/k8s/test_k8s_training_stale_reclaim.py)
    assert resize(KubernetesActuator(api, sleep=sleeps.append, clock=clock), 3, 0).outcome is Outcome.APPLIED
    spec = kube.get("jobs", "train", "ml")["spec"]
    assert (spec["suspend"], spec["parallelism"]) == (False, 3)
