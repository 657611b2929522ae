"""A queued Job labelled `gputide.io/suspended` but still running (a stop cut between its label and its Workload's
deactivation, or a label an older gputide left on a Job Kueue kept running) holds its quota: a resize moves the
quota of the change from the workers it runs. It was taken as stopped by its label alone (0 workers), so a shrink
lent quota instead of giving it back and a grow lent it for every worker. Only a Job suspended, or whose Workload
is inactive, counts as stopped."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube
from test_k8s_kueue_stop import cohort, gpus, queued

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.kubernetes import SUSPENDED_LABEL
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


class Killed(BaseException):
    """The controller dies (SIGKILL, OOM): no handler runs."""


def actuator(kube: FakeKube, clock) -> KubernetesActuator:
    return KubernetesActuator(kube.client(), sleep=lambda _s: None, clock=clock, kueue_queues=("inference", "training"))


def scale(act: KubernetesActuator, workers: int, previous: int):
    return act.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous), SNAP)


def elastic(kube: FakeKube) -> FakeKube:
    """ml/train at 4 workers of 2 GPUs, admitted and running, resized in place by Kueue (elastic-job)."""
    cohort(kube)
    queued(kube)
    kube.mutate("jobs", "train", "ml", {"metadata": {"annotations": {"kueue.x-k8s.io/elastic-job": "true"}}})
    return kube


@pytest.fixture
def running(kube: FakeKube) -> FakeKube:
    return elastic(kube)


def test_a_stop_killed_before_the_deactivation_then_shrunk_gives_quota_back(running: FakeKube, clock) -> None:
    first = actuator(running, clock)

    def killed(*_args, **_kwargs):
        raise Killed

    first.training.kueue.set_active = killed
    with pytest.raises(Killed):
        scale(first, 0, 4)
    job = running.get("jobs", "train", "ml")
    assert job["metadata"]["labels"][SUSPENDED_LABEL] == "true" and not job["spec"].get("suspend")
    result = scale(actuator(running, clock), 3, 4)   # the restarted controller shrinks the Job it sees running
    assert result.outcome is Outcome.APPLIED, result.detail
    assert gpus(running) == (18, 6)   # 2 GPUs back to inference, none lent


def test_an_old_label_on_a_running_job_grown_lends_the_change_only(running: FakeKube, clock) -> None:
    running.mutate("jobs", "train", "ml", {"metadata": {"labels": {SUSPENDED_LABEL: "true"}},
                                           "spec": {"suspend": True}})
    assert not running.get("jobs", "train", "ml")["spec"].get("suspend")   # Kueue keeps it running
    result = scale(actuator(running, clock), 5, 4)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert gpus(running) == (14, 10) and "parallelism = 5" in result.detail
    assert SUSPENDED_LABEL not in running.get("jobs", "train", "ml")["metadata"]["labels"]
