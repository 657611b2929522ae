"""A hotspot shrink is recorded on the Job it resized (`gputide.io/shrunk`), in the same patch, and read back into
the job's pods: what a restarted controller or a new leader gives the workers back from."""

from __future__ import annotations

import json

import numpy as np
import pytest
from fakeapi import FakeKube, job, pod
from test_k8s_workloads import with_meta

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_jobs import SHRUNK_ANNOTATION
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining

SNAP = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})
ELASTIC = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8"}


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def scale(actuator: KubernetesActuator, workers: int, previous: int, shrunk_from: int | None):
    result = actuator.apply(ScaleTraining(reason="test", job="ml/train", workers=workers, previous_workers=previous,
                                          shrunk_from=shrunk_from), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    return result


def record(kube: FakeKube) -> dict | None:
    note = (kube.get("jobs", "train", "ml")["metadata"].get("annotations") or {}).get(SHRUNK_ANNOTATION)
    return None if note is None else json.loads(note)


def test_a_hotspot_shrink_writes_its_record_in_the_resize_and_its_give_back_removes_it(kube: FakeKube, actuator):
    kube.add(job("train", "ml", parallelism=4))
    scale(actuator, 3, 4, shrunk_from=4)
    (patch,) = kube.calls("PATCH", r"/jobs/train$")   # one write: the Job is never shrunk without its record
    assert patch.body["spec"]["parallelism"] == 3
    assert json.loads(patch.body["metadata"]["annotations"][SHRUNK_ANNOTATION]) == {"from": 4, "to": 3}
    assert record(kube) == {"from": 4, "to": 3}
    scale(actuator, 4, 3, shrunk_from=0)
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 4 and record(kube) is None


def test_a_resize_that_is_no_hotspot_shrink_leaves_the_record_as_it_is(kube: FakeKube, actuator):
    kube.add(job("train", "ml", parallelism=4))
    scale(actuator, 3, 4, shrunk_from=4)
    scale(actuator, 2, 3, shrunk_from=None)   # the tide, or co-location: not the hotspot planner's record to change
    assert record(kube) == {"from": 4, "to": 3}


def _pods_of_train(kube: FakeKube, n: int) -> None:
    for i in range(n):
        kube.add(with_meta(pod(f"train-{i}", "ml", owner=("Job", "train")), annotations=ELASTIC))


def _read(api, clock):
    """A restarted controller's first read of the pods (a fresh provider, nothing remembered)."""
    got = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)()
    return {(w.shrunk_from, w.shrink_overridden) for w in got.values()}


def test_a_restarted_controller_reads_the_shrink_back_from_the_job(kube: FakeKube, api, clock, actuator):
    kube.add(job("train", "ml", parallelism=4))
    _pods_of_train(kube, 3)
    scale(actuator, 3, 4, shrunk_from=4)
    assert _read(api, clock) == {(4, False)}


def test_a_job_resized_by_hand_after_the_shrink_has_a_void_record(kube: FakeKube, api, clock, actuator):
    kube.add(job("train", "ml", parallelism=4))
    _pods_of_train(kube, 3)
    scale(actuator, 3, 4, shrunk_from=4)
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 6}})   # kubectl scale: the operator's size now
    assert _read(api, clock) == {(0, True)}


@pytest.mark.parametrize("note", ["not json", '{"from": 3, "to": 3}', '{"from": 4}', '["4", "3"]'],
                         ids=["not JSON", "no shrink", "no size left", "not an object"])
def test_a_malformed_record_is_no_record(kube: FakeKube, api, clock, note):
    j = job("train", "ml", parallelism=3)
    j["metadata"]["annotations"] = {SHRUNK_ANNOTATION: note}
    kube.add(j)
    _pods_of_train(kube, 3)
    assert _read(api, clock) == {(0, False)}
