"""Co-location's shrink is recorded on the Job it resized (`gputide.io/colocation-shrunk`), in the same patch as the
size, and read back into the Job's pods, so a restarted controller or a new leader still gives the workers back.

Before, the shrink lived only in the controller's memory: after a restart the Job stayed shrunk until its owner
resized it. The decision of what each gputide resize does to the record is `colocation_record.after` (shared with
the simulator); here it is checked on its own, then through the Kubernetes actuator's patch and the workload reader.
"""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, job, pod
from test_k8s_workloads import with_meta

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_jobs import (
    COLOCATION_ANNOTATION,
    SHRUNK_ANNOTATION,
    colocation_patch,
    colocation_record,
)
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.actuate.kubernetes import RESIZED_ANNOTATION
from balancer.colocation_record import ColocationRecord, after, parse
from balancer.model import ScaleTraining
from tests.k8s.test_k8s_shrink_record import SNAP

ELASTIC = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8"}
REC = ColocationRecord(4, 3, "svc")   # co-location shrank the job from 4 workers to 3 for svc



def resize(workers: int, previous: int, cause=None, service: str = "", shrunk_from=None) -> ScaleTraining:
    return ScaleTraining(reason="test", job="ml/train", workers=workers, previous_workers=previous, cause=cause,
                         service=service, shrunk_from=shrunk_from)


def after_cases():
    return {
        "co-location shrink: written": (None, 4, resize(3, 4, "colocation_slo", "svc"), REC),
        "co-location shrink over a void record: written anew": (
            REC, 6, resize(5, 6, "colocation_slo", "other"), ColocationRecord(6, 5, "other")),
        "co-location shrink of a job it holds: keeps the larger before": (
            REC, 3, resize(2, 3, "colocation_slo", "svc"), ColocationRecord(4, 2, "svc")),
        "its give-back: removed": (REC, 3, resize(4, 3, "colocation_slack"), None),
        "the tide's loan: removed": (REC, 3, resize(5, 3, "loan"), None),
        "the tide's reclaim: removed": (REC, 3, resize(2, 3, "reclaim"), None),
        "a hotspot shrink: kept valid at the new size": (
            REC, 3, resize(2, 3, shrunk_from=3), ColocationRecord(4, 2, "svc")),
        "a hotspot give-back short of before: kept valid": (
            ColocationRecord(5, 2, "svc"), 2, resize(3, 2, shrunk_from=0), ColocationRecord(5, 3, "svc")),
        "a resize back at before: removed": (REC, 3, resize(4, 3, shrunk_from=0), None),
        "a stop: removed": (REC, 3, resize(0, 3), None),
        "any resize of a void record: removed": (REC, 5, resize(2, 5, shrunk_from=5), None),
        "no record, not co-location: none": (None, 4, resize(2, 4, shrunk_from=4), None),
        "co-location shrink of a job asking for more than run: its size is before": (
            None, 5, resize(3, 4, "colocation_slo", "svc"), ColocationRecord(5, 3, "svc")),
    }


@pytest.mark.parametrize(("record", "size", "action", "expected"), after_cases().values(), ids=after_cases().keys())
def test_what_each_gputide_resize_does_to_the_record(record, size, action, expected):
    assert after(record, size, action) == expected


@pytest.mark.parametrize("note", [
    "", "not json", "[4, 3]", '{"from": 4, "to": 3}', '{"from": 3, "to": 4, "service": "svc"}',
    '{"from": 4, "to": 0, "service": "svc"}', '{"from": "4", "to": 3, "service": "svc"}',
    '{"from": 4, "to": 3, "service": ""}', '{"from": 4.5, "to": 3, "service": "svc"}'])
def test_a_note_that_is_not_a_shrink_record_reads_as_none(note):
    assert parse(note) is None


def test_a_record_reads_back_as_written():
    assert parse(REC.note()) == REC and json.loads(REC.note()) == {"from": 4, "to": 3, "service": "svc"}


def shrunk_job(kube: FakeKube, parallelism: int = 3, record: ColocationRecord | None = REC) -> None:
    j = job("train", "ml", parallelism=parallelism)
    j["metadata"]["annotations"] = {COLOCATION_ANNOTATION: record.note()} if record else {}
    kube.add(j)


def note(kube: FakeKube, key: str = COLOCATION_ANNOTATION) -> str | None:
    return (kube.get("jobs", "train", "ml")["metadata"].get("annotations") or {}).get(key)


def records(patch) -> dict:
    """The shrink records a Job patch writes: its annotations but the resize time every resize stamps."""
    return {k: v for k, v in (patch.body["metadata"].get("annotations") or {}).items() if k != RESIZED_ANNOTATION}


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock)


def apply(actuator: KubernetesActuator, action: ScaleTraining) -> str:
    result = actuator.apply(action, SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    return result.detail


def test_the_colocation_shrink_writes_its_record_in_the_patch_that_resizes_the_job(kube: FakeKube, actuator):
    shrunk_job(kube, parallelism=4, record=None)
    detail = apply(actuator, resize(3, 4, "colocation_slo", "svc"))
    (patch,) = kube.calls("PATCH", r"/jobs/train$")
    assert patch.body["spec"]["parallelism"] == 3
    assert records(patch) == {COLOCATION_ANNOTATION: REC.note()}
    assert f"{COLOCATION_ANNOTATION} = {REC.note()}" in detail


def test_the_give_back_removes_it_in_the_same_patch(kube: FakeKube, actuator):
    shrunk_job(kube)
    detail = apply(actuator, resize(4, 3, "colocation_slack"))
    (patch,) = kube.calls("PATCH", r"/jobs/train$")
    assert patch.body["spec"]["parallelism"] == 4
    assert records(patch) == {COLOCATION_ANNOTATION: None}
    assert note(kube) is None and f"{COLOCATION_ANNOTATION} removed" in detail


def test_a_hotspot_shrink_writes_both_records_in_one_patch(kube: FakeKube, actuator):
    shrunk_job(kube)
    apply(actuator, resize(2, 3, shrunk_from=3))
    (patch,) = kube.calls("PATCH", r"/jobs/train$")
    assert records(patch) == {
        SHRUNK_ANNOTATION: json.dumps({"from": 3, "to": 2}),
        COLOCATION_ANNOTATION: ColocationRecord(4, 2, "svc").note()}


def test_a_resize_that_leaves_the_record_as_it_is_does_not_touch_it(kube: FakeKube):
    shrunk_job(kube, parallelism=4, record=None)
    assert colocation_patch(kube.get("jobs", "train", "ml"), resize(5, 4, "loan")) == {}


def pods(kube: FakeKube, n: int) -> None:
    for i in range(n):
        kube.add(with_meta(pod(f"train-{i}", "ml", owner=("Job", "train")), annotations=ELASTIC))


def test_the_job_s_pods_carry_a_valid_record(kube: FakeKube, api, clock):
    shrunk_job(kube)
    pods(kube, 3)
    got = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)()
    assert {(w.colocation_from, w.colocation_service) for w in got.values()} == {(4, "svc")}


def test_a_job_resized_by_someone_else_since_carries_none(kube: FakeKube, api, clock):
    shrunk_job(kube)
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 2}})   # kubectl scale: the record reads void
    pods(kube, 2)
    assert colocation_record(kube.get("jobs", "train", "ml")) == (None, True) and note(kube) == REC.note()
    got = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)()
    assert {(w.colocation_from, w.colocation_service) for w in got.values()} == {(0, "")}


def test_a_shrink_records_the_workers_the_job_asked_for_not_only_those_running(kube: FakeKube, actuator):
    """The planner counts running pods (3); the Job asks for 4 (one pending): both records keep 4, so the give-back
    restores what the owner asked for instead of losing the pending worker for good."""
    shrunk_job(kube, parallelism=4, record=None)
    apply(actuator, resize(2, 3, "colocation_slo", "svc"))
    assert parse(note(kube)) == ColocationRecord(4, 2, "svc")
    kube.delete("jobs", "train", "ml")
    shrunk_job(kube, parallelism=4, record=None)
    apply(actuator, resize(2, 3, shrunk_from=3))
    assert json.loads(note(kube, SHRUNK_ANNOTATION)) == {"from": 4, "to": 2}
