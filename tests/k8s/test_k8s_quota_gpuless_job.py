"""A queued Job whose pods request no GPU moves no Kueue GPU quota when resized. The GPUs a resize moves were the
change of workers times the pod's GPU request, with a request of 0 counted as 1: a CPU-only Job (a data loader, an
evaluator) queued in training's ClusterQueue moved a GPU of nominalQuota per worker it gained or lost, quota no pod of
it holds (and the drift check, which counts what pods request, then gave it back a cycle later). It moves what its
pods request: nothing."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, clusterqueue, job
from test_k8s_quota_restart import controller, quota, scale

from balancer.actuate.base import Outcome


def _job(gpus: str | None) -> dict:
    """ml/train, 4 workers queued in training, each asking for `gpus` (None: no GPU resource at all)."""
    obj = job("train", "ml", parallelism=4, queue="training-lq")
    container = obj["spec"]["template"]["spec"]["containers"][0]
    if gpus is None:
        del container["resources"]
    else:
        container["resources"]["limits"]["nvidia.com/gpu"] = gpus
    return obj


@pytest.mark.parametrize(
    ("gpus", "workers", "expected"),
    [
        pytest.param(None, 6, (16, 8), id="a grow of a Job with no GPU resource moves no quota"),
        pytest.param(None, 2, (16, 8), id="a shrink of a Job with no GPU resource moves no quota"),
        pytest.param("0", 6, (16, 8), id="a grow of a Job asking for 0 GPUs moves no quota"),
        pytest.param("2", 6, (12, 12), id="a grow of a Job asking for 2 GPUs a worker moves 2 per worker"),
        pytest.param("2", 2, (20, 4), id="a shrink of a Job asking for 2 GPUs a worker gives back 2 per worker"),
    ],
)
def test_a_resize_moves_the_gpu_quota_its_pods_request(kube: FakeKube, api, clock, sleeps, gpus, workers,
                                                       expected) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))
    kube.add(_job(gpus))
    result = scale(controller(api, clock, sleeps), workers)
    assert result.outcome is Outcome.APPLIED, result
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == workers
    assert quota(kube) == expected
    if gpus in (None, "0"):
        assert "kueue quota" not in result.detail, result.detail
