"""A Job's hotspot shrink record (`gputide.io/shrunk`) goes once it is done with: gputide's resize that leaves the Job
at the record's `from` or more (the capacity planner's tide grew it back), or any gputide change of a Job whose
record is void (resized by someone else since), removes it in the same patch as the size. Before, such a record
stayed on the Job: the give-back was proposed (and, in capacity mode, dropped) every cycle, the job could not be
hotspot-shrunk again, and a void record counted again once the Job came back to exactly its `to`."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, job, pod
from test_k8s_workloads import with_meta

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_jobs import SHRUNK_ANNOTATION, shrink_patch
from balancer.actuate.k8s_kueue import RESIZE_RESTARTS_ANNOTATION
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.actuate.kubernetes import RESIZED_ANNOTATION, parse_time, rfc3339
from balancer.model import ScaleTraining
from tests.k8s.test_k8s_shrink_record import SNAP

ELASTIC = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8"}
SHRUNK_4_TO_3 = json.dumps({"from": 4, "to": 3})


def records(patch) -> dict:
    """The shrink records a Job patch writes: its annotations but the resize time every resize stamps."""
    return {k: v for k, v in (patch.body["metadata"].get("annotations") or {}).items() if k != RESIZED_ANNOTATION}


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def shrunk_job(kube: FakeKube, parallelism: int = 3) -> None:
    """ml/train, shrunk by a hotspot from 4 workers to 3 (its record), now at `parallelism`."""
    j = job("train", "ml", parallelism=parallelism)
    j["metadata"]["annotations"] = {SHRUNK_ANNOTATION: SHRUNK_4_TO_3}
    kube.add(j)


def scale(actuator: KubernetesActuator, workers: int, previous: int, shrunk_from: int | None = None) -> str:
    """A gputide resize; by default not the hotspot planner's (the tide, co-location: `shrunk_from` None)."""
    result = actuator.apply(ScaleTraining(reason="capacity: test", job="ml/train", workers=workers,
                                          previous_workers=previous, shrunk_from=shrunk_from), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    return result.detail


def note(kube: FakeKube) -> str | None:
    return (kube.get("jobs", "train", "ml")["metadata"].get("annotations") or {}).get(SHRUNK_ANNOTATION)


@pytest.mark.parametrize("workers", [4, 6], ids=["back at from", "beyond from"])
def test_the_tide_growing_the_job_back_removes_the_record_in_the_same_patch(kube: FakeKube, actuator, workers):
    shrunk_job(kube)
    detail = scale(actuator, workers, 3)
    (patch,) = kube.calls("PATCH", r"/jobs/train$")
    assert patch.body["spec"]["parallelism"] == workers
    assert records(patch) == {SHRUNK_ANNOTATION: None}
    assert note(kube) is None and f"{SHRUNK_ANNOTATION} removed" in detail


def test_a_resize_short_of_from_keeps_a_valid_record_and_the_next_one_removes_it_as_void(kube: FakeKube, actuator):
    shrunk_job(kube)
    detail = scale(actuator, 2, 3)   # the tide takes one more worker: the record was valid, it stays (now void)
    assert note(kube) == SHRUNK_4_TO_3 and SHRUNK_ANNOTATION not in detail
    scale(actuator, 3, 2)   # back at exactly its `to`: a void record must not count again
    assert note(kube) is None


@pytest.mark.parametrize("workers", [1, 3, 5], ids=["below to", "exactly to", "between to and from"])
def test_a_job_resized_by_someone_else_loses_its_void_record_on_gputides_next_resize(kube: FakeKube, api, clock,
                                                                                     actuator, workers):
    shrunk_job(kube, parallelism=6)   # kubectl scale after the shrink: the record is void
    for i in range(workers):
        kube.add(with_meta(pod(f"train-{i}", "ml", owner=("Job", "train")), annotations=ELASTIC))
    scale(actuator, workers, 6)
    assert note(kube) is None
    got = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)()
    assert {(w.shrunk_from, w.shrink_overridden) for w in got.values()} == {(0, False)}


def test_a_stop_removes_a_void_record_and_keeps_a_valid_one(kube: FakeKube, actuator):
    shrunk_job(kube, parallelism=6)
    assert f"{SHRUNK_ANNOTATION} removed" in scale(actuator, 0, 6)
    assert note(kube) is None
    kube.delete("jobs", "train", "ml")
    shrunk_job(kube)
    scale(actuator, 0, 3)   # a stop keeps the Job's size: its record still matches it
    assert note(kube) == SHRUNK_4_TO_3


def test_a_resize_by_someone_else_leaves_the_record_alone(kube: FakeKube):
    """The rule is gputide's: `kubectl scale` to 4 leaves the annotation, which then reads void."""
    shrunk_job(kube)
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 4}})
    assert note(kube) == SHRUNK_4_TO_3


def patch_cases():
    return {
        "hotspot shrink: the record": (4, 3, 4, {SHRUNK_ANNOTATION: json.dumps({"from": 4, "to": 3})}),
        "give-back: removed": (3, 4, 0, {SHRUNK_ANNOTATION: None}),
        "other resize back at from: removed": (3, 4, None, {SHRUNK_ANNOTATION: None}),
        "other resize below from of a valid record: nothing": (3, 2, None, None),
        "other resize of a void record: removed": (5, 3, None, {SHRUNK_ANNOTATION: None}),
        "stop of a valid record: nothing": (3, 0, None, None),
    }


@pytest.mark.parametrize(("size", "workers", "shrunk_from", "annotations"), patch_cases().values(),
                         ids=patch_cases().keys())
def test_shrink_patch(size, workers, shrunk_from, annotations):
    j = job("train", "ml", parallelism=size)
    j["metadata"]["annotations"] = {SHRUNK_ANNOTATION: SHRUNK_4_TO_3}
    assert shrink_patch(j, workers, shrunk_from) == ({} if annotations is None else {"annotations": annotations})


def test_a_job_without_a_record_gets_no_record_from_other_resizes(kube: FakeKube, actuator):
    kube.add(job("train", "ml", parallelism=3))
    scale(actuator, 5, 3)
    (patch,) = kube.calls("PATCH", r"/jobs/train$")
    assert records(patch) == {}


@pytest.mark.parametrize(("size", "workers", "restarts", "stamped"), [
    (5, 3, False, True), (3, 5, False, False), (3, 5, True, True), (3, 3, False, False),
], ids=["a shrink restarts its work", "a plain grow loses nothing", "a grow that restarts every worker",
        "planned from a snapshot that lagged: already at that size, nothing restarts"])
def test_a_resize_that_restarts_the_jobs_work_stamps_when(kube: FakeKube, actuator, clock, size, workers, restarts,
                                                          stamped):
    # what it did since its checkpoint was lost then (unless it checkpoints on SIGTERM): the planner counts its work
    # at risk from that time (tests/k8s/test_k8s_checkpoint_age.py)
    j = job("train", "ml", parallelism=size)
    if restarts:
        j["metadata"]["annotations"] = {RESIZE_RESTARTS_ANNOTATION: "true"}
    kube.add(j)
    scale(actuator, workers, 4)
    patches = kube.calls("PATCH", r"/jobs/train$")   # none for a shrink the Job is already at: nothing to write
    assert len(patches) == (size != workers)
    notes = (patches[0].body["metadata"].get("annotations") or {}) if patches else {}
    assert notes.get(RESIZED_ANNOTATION) == (rfc3339(clock()) if stamped else None)
    if stamped:
        meta = kube.get("jobs", "train", "ml")["metadata"]
        assert parse_time(meta["annotations"][RESIZED_ANNOTATION]) == int(clock())
