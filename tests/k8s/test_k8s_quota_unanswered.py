"""A Kueue quota move whose patch landed but got no answer is not applied twice. The gateway retries an unanswered
write with the same body; the API server answers that retry 409 (the first try changed the resourceVersion) and the
read-modify-write reads the queue again: recomputing "nominalQuota - N" there would take N GPUs a second time, and
the cohort would be short of them for good (nothing gives them back)."""

from __future__ import annotations

import functools

import numpy as np
import pytest
import urllib3
from fakeapi import FakeKube, clusterqueue, job

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def quota(kube: FakeKube, queue: str) -> int:
    return kube.get("clusterqueues", queue)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]["nominalQuota"]


def unanswered_once(actuator: KubernetesActuator, queue: str) -> None:
    """The first patch of ClusterQueue `queue` is carried out, but its answer never comes (a read timeout)."""
    real, done = actuator.api.custom.patch_cluster_custom_object, []

    @functools.wraps(real)   # keeps its name: the gateway knows a write by it
    def patch(*args, **kwargs):
        out = real(*args, **kwargs)
        if args[3] == queue and not done:
            done.append(True)
            raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out. (read timeout=10.0)")
        return out

    actuator.api.custom.patch_cluster_custom_object = patch


@pytest.mark.parametrize(("queue", "workers"), [("inference", 6), ("training", 6), ("training", 2), ("inference", 2)])
def test_an_unanswered_quota_patch_that_landed_is_not_applied_again(kube: FakeKube, api, clock, sleeps, queue,
                                                                     workers) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))
    unanswered_once(actuator, queue)
    result = actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=4), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    moved = (workers - 4) * 2
    assert (quota(kube, "inference"), quota(kube, "training")) == (16 - moved, 8 + moved)


def unanswered_then(actuator: KubernetesActuator, queue: str, meanwhile) -> None:
    """The first patch of ClusterQueue `queue` is carried out but gets no answer, and `meanwhile()` (other
    controllers' work) runs before the gateway's retry of it."""
    real, tries = actuator.api.custom.patch_cluster_custom_object, []

    @functools.wraps(real)   # keeps its name: the gateway knows a write by it
    def patch(*args, **kwargs):
        if args[3] == queue:
            tries.append(True)
            if len(tries) == 1:
                real(*args, **kwargs)
                raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out. (read timeout=10.0)")
            if len(tries) == 2:
                meanwhile()
        return real(*args, **kwargs)

    actuator.api.custom.patch_cluster_custom_object = patch


@pytest.mark.parametrize("queue", [pytest.param("training", id="the lowering"),
                                   pytest.param("inference", id="the raise")])
def test_a_landed_write_another_shard_settled_and_moved_on_before_the_retry_is_not_applied_again(
        kube: FakeKube, api, clock, sleeps, queue) -> None:
    """A's shrink lowers training and raises inference (frees 4); one patch lands unanswered, and before the gateway's
    retry reads the queue again B settles A's move and shrinks (frees 2, its record replacing A's on training, its
    note A's on inference). The lowering's retry found no record of A's move and lowered training by 4 again, then
    raised inference again: (26, 6) for 6 GPUs freed; training's move history (`gputide.io/quota-moves`) holding
    A's id, it knows its write landed. The raise's retry found its move not noted and raised inference again, its
    note replacing B's, so the next settle completed B's move again: (28, 10); training's record now B's, A's move
    was settled (`KueueQuota._mark`)."""
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 16))
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    a, b = (KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))
            for _ in range(2))

    def meanwhile() -> None:   # the retry: B's housekeeping and shrink came first
        b.housekeeping()
        assert b.apply(ScaleTraining(reason="tide", job="ml/train", workers=1, previous_workers=2),
                       SNAP).outcome is Outcome.APPLIED

    unanswered_then(a, queue, meanwhile)
    result = a.apply(ScaleTraining(reason="tide", job="ml/train", workers=2, previous_workers=4), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    a.housekeeping()
    b.housekeeping()
    assert (quota(kube, "inference"), quota(kube, "training")) == (22, 10)
