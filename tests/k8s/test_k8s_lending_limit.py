"""Kueue's lendingLimit after a loan is given back. Lending quota lowers the inference ClusterQueue's nominalQuota,
and its lendingLimit with it (Kueue refuses a lendingLimit above nominalQuota); giving the quota back raised only
the nominalQuota, so after one night's loan the queue could lend for good less than its operator set. The
operator's lendingLimit is kept on the ClusterQueue while it is clamped and put back with the quota."""

from __future__ import annotations

import numpy as np
from fakeapi import FakeKube, clusterqueue, job

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


def gpu(kube: FakeKube, queue: str) -> tuple[int, int]:
    res = kube.get("clusterqueues", queue)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
    return res["nominalQuota"], res["lendingLimit"]


def scale(api, clock, sleeps, workers: int, previous: int) -> None:
    # a fresh actuator each time: what is remembered must be on the ClusterQueue, not in the controller
    actuator = KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))
    result = actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                            SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail


def test_a_loan_given_back_restores_the_operators_lending_limit(kube: FakeKube, api, clock, sleeps) -> None:
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 8, lending=8))
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    scale(api, clock, sleeps, 6, 4)   # 4 GPUs lent: inference 12, its lendingLimit clamped to 12
    assert gpu(kube, "inference") == (12, 12)
    scale(api, clock, sleeps, 8, 6)   # 4 more: 8, clamped to 8
    assert gpu(kube, "inference") == (8, 8)
    scale(api, clock, sleeps, 5, 8)   # 6 back: 14, the operator's 14 again
    assert gpu(kube, "inference") == (14, 14)
    scale(api, clock, sleeps, 4, 5)   # the rest back: 16, still the operator's 14
    assert gpu(kube, "inference") == (16, 14)
    assert "gputide.io/own-lending-limits" not in (kube.get("clusterqueues", "inference")["metadata"].get(
        "annotations") or {})
    assert gpu(kube, "training") == (8, 8)
