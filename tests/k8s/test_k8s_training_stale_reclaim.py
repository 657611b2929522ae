"""A reclaim (training giving loaned GPUs back to inference) goes through whatever workers the plan did not see, and a
shrink planned from a stale view never raises a Job's size.

The plan's worker count is the Job's pods the telemetry places on GPUs: workers on a GPU node without an exporter,
or whose exporter has been dark for long, are never counted. 16a2b3d refused a resize that would stop running
workers the plan did not see as stale (RETRY 409), and the planner does not remember refused resizes: such a Job
looked stale every cycle and its reclaim was refused for ever (h-review's repro: runs 8, the plan saw 6, reclaim to
4, five cycles RETRY 409, parallelism stays 8). Now the size written stops the running workers the plan meant
(8 - (6 - 4) = 6).

A reclaim planned from a view older than its owner's own shrink (8 -> 4 since; the plan "reclaims" 8 -> 6) wrote 6:
the shrink grew the Job, lending it GPUs inference was to get back. Now a shrink whose target is at or above what
the Job asks for (or of a Job gputide stopped since) writes nothing and moves no quota.

A stop (0 workers: the capacity planner stops a Job it cannot shrink below its elastic minimum) of a Job running
more than the plan saw was cut like a resize (h-review2's repro: runs 8, saw 6, reclaim stop -> parallelism 2, not
suspended, not labelled, below its elastic minimum 4, its GPUs held, applied). Now a stop suspends the Job whole and
says it stopped workers the plan did not see; and a cut that would fall below the Job's elastic minimum writes that
minimum (it stops fewer workers than the plan meant, never more)."""

from __future__ import annotations

import json

import pytest
from fakeapi import FakeKube, clusterqueue, job, workload
from test_k8s_training_unseen_workers import SNAP, add_job, parallelism, quota
from test_k8s_training_unseen_workers import actuator as actuator  # noqa: F401  (the fixture)

from balancer.actuate.base import Outcome
from balancer.actuate.kubernetes import SUSPENDED_LABEL
from balancer.model import ScaleTraining


def reclaim(actuator, workers: int, previous: int, **extra):  # noqa: F811
    return actuator.apply(ScaleTraining(reason="reclaim", job="ml/train", workers=workers, previous_workers=previous,
                                        reclaim=True, cause="reclaim", **extra), SNAP)


def test_a_reclaim_of_a_job_with_workers_the_plan_never_sees_goes_through(
        kube: FakeKube, actuator) -> None:  # noqa: F811
    add_job(kube, 8, 8)   # 8 run; the snapshot sees the 6 on nodes with an exporter
    result = reclaim(actuator, 4, 6)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert parallelism(kube) == 6   # the 2 workers the plan meant stop, not 4


def test_a_reclaim_from_a_view_older_than_its_owners_shrink_does_not_grow_the_job(
        kube: FakeKube, actuator) -> None:  # noqa: F811
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 16))
    add_job(kube, 4, 4, queue="training-lq")   # its owner shrank it 8 -> 4 since the snapshot
    result = reclaim(actuator, 6, 8)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert "left as it is (already)" in result.detail and "it asks for 4" in result.detail
    assert parallelism(kube) == 4
    assert kube.calls("PATCH", r"/jobs/train$") == []
    assert quota(kube) == (16, 16)


def test_a_shrink_of_a_job_already_at_its_target_writes_nothing(kube: FakeKube, actuator) -> None:  # noqa: F811
    add_job(kube, 6, 6)
    result = reclaim(actuator, 6, 8)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert kube.calls("PATCH", r"/jobs/train$") == []


def test_a_shrink_of_a_job_gputide_stopped_since_does_not_resume_it(kube: FakeKube, actuator) -> None:  # noqa: F811
    obj = job("train", "ml", parallelism=8, gpus=2, suspend=True)
    obj["metadata"]["labels"][SUSPENDED_LABEL] = "true"
    kube.add(obj)
    result = reclaim(actuator, 6, 8)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert kube.get("jobs", "train", "ml")["spec"]["suspend"] is True
    assert kube.calls("PATCH", r"/jobs/train$") == []


def test_a_hotspot_shrink_records_the_cut_it_wrote(kube: FakeKube, actuator) -> None:  # noqa: F811
    add_job(kube, 8, 8)   # the plan saw 6 and takes one: 7 written, recorded 8 -> 7 for the give-back
    result = actuator.apply(ScaleTraining(reason="hot", job="ml/train", workers=5, previous_workers=6,
                                          shrunk_from=6), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    meta = kube.get("jobs", "train", "ml")["metadata"]
    assert parallelism(kube) == 7
    assert json.loads(meta["annotations"]["gputide.io/shrunk"]) == {"from": 8, "to": 7}


def test_a_colocation_shrink_records_the_cut_it_wrote(kube: FakeKube, actuator) -> None:  # noqa: F811
    add_job(kube, 8, 8)   # the plan saw 6 and shrinks to 4 for the service: 6 written, recorded 8 -> 6
    result = actuator.apply(ScaleTraining(reason="slo", job="ml/train", workers=4, previous_workers=6,
                                          cause="colocation_slo", service="chat"), SNAP)
    assert result.outcome is Outcome.APPLIED, result.detail
    meta = kube.get("jobs", "train", "ml")["metadata"]
    assert parallelism(kube) == 6
    assert json.loads(meta["annotations"]["gputide.io/colocation-shrunk"]) == {"from": 8, "to": 6, "service": "chat"}


def elastic(kube: FakeKube, low: int, high: int) -> None:
    """The Job's pods (its template) elastic from `low` to `high` workers, as the planners read them."""
    kube.mutate("jobs", "train", "ml", {"spec": {"template": {"metadata": {"annotations": {
        "gputide.io/elastic-min": str(low), "gputide.io/elastic-max": str(high)}}}}})


@pytest.mark.parametrize("low", [None, 4], ids=["not elastic", "elastic minimum 4"])
def test_a_stop_of_a_job_with_workers_the_plan_never_sees_suspends_it_whole(
        kube: FakeKube, actuator, low) -> None:  # noqa: F811
    add_job(kube, 8, 8)   # 8 run, the plan saw 6 and stops the Job (it cannot shrink below its elastic minimum)
    if low:
        elastic(kube, low, 8)
    result = reclaim(actuator, 0, 6)
    assert result.outcome is Outcome.APPLIED, result.detail
    obj = kube.get("jobs", "train", "ml")
    assert obj["spec"]["suspend"] is True and parallelism(kube) == 8
    assert obj["metadata"]["labels"][SUSPENDED_LABEL] == "true"
    assert "suspended" in result.detail
    assert "more than the 6 the plan saw run: all stopped, workers the plan did not see included" in result.detail


def test_a_queued_job_stopped_with_unseen_workers_gives_back_all_its_quota(
        kube: FakeKube, actuator) -> None:  # noqa: F811
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 16))
    add_job(kube, 8, 8, queue="training-lq")
    kube.add(workload(kube.get("jobs", "train", "ml"), "h100"))
    result = reclaim(actuator, 0, 6)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert "deactivated" in result.detail
    assert quota(kube) == (32, 0)   # 8 workers of 2 GPUs, not 6


@pytest.mark.parametrize(
    ("low", "expected"),
    [
        pytest.param(4, 4, id="the cut to 3 would leave it below its minimum 4: 4 written, 4 stop, not the 5 meant"),
        pytest.param(2, 3, id="a minimum below the cut changes nothing: 3"),
        pytest.param(8, 8, id="a minimum at its size: left as it is"),
    ],
)
def test_a_cut_for_unseen_workers_never_goes_below_the_jobs_elastic_minimum(
        kube: FakeKube, actuator, low, expected) -> None:  # noqa: F811
    add_job(kube, 8, 8)   # the plan saw 6 and shrinks to 1 (its view of the minimum older): 5 meant, 3 left
    elastic(kube, low, 8)
    result = reclaim(actuator, 1, 6)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert parallelism(kube) == expected
    assert not kube.get("jobs", "train", "ml")["spec"].get("suspend")
    if expected == 4:
        assert "resized to 4, not 1" in result.detail and "none below its elastic minimum 4" in result.detail
