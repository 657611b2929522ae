"""A quota move whose borrower's raise got no answer, and whose roll-back then failed, is reported as possibly carried
out. The borrower's unanswered patch was listed in the move's own `writes()` block and then "handed up" to that same
list (read inside the block), so it was lost when the block closed: the action failed as if nothing had been written,
and the loop did not count against the safety budgets a quota move that may have landed."""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube
from test_k8s_kueue_label_running import elastic as running_job
from test_k8s_unknown_outcome import no_answer

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def test_a_borrower_raise_unanswered_then_a_failed_roll_back_is_possibly_applied(kube: FakeKube, actuator) -> None:
    running_job(kube)
    custom = actuator.api.custom
    real = custom.patch_cluster_custom_object

    def borrower_dark() -> None:   # the raise of training lands; from then on its queue cannot be read (the fence)
        kube.inject("GET", r"/clusterqueues/training$", 500, count=100)

    dark = no_answer(real, borrower_dark)

    def patch(group, version, plural, name, *args, **kwargs):
        return (dark if name == "training" else real)(group, version, plural, name, *args, **kwargs)

    patch.__name__ = real.__name__   # how the gateway knows a write
    custom.patch_cluster_custom_object = patch
    result = actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=6, previous_workers=4), SNAP)
    assert result.outcome is not Outcome.APPLIED, result.detail
    assert result.maybe_applied and "clusterqueue training" in result.detail, result.detail
