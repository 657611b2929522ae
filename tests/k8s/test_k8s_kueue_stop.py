"""Stopping and resuming a Job queued through Kueue, against the fake API server running Kueue's job reconciler.

Kueue owns `spec.suspend` of a Job labelled `kueue.x-k8s.io/queue-name`: it unsuspends a suspended Job whose
Workload is admitted and suspends a running one whose Workload is not (kubernetes-sigs/kueue#1726). A suspend
patched on such a Job is undone and the Job keeps its GPUs while its quota has gone to inference; gputide stops it
through its Workload (`spec.active: false`) instead, and resumes it with `spec.active: true`.
"""

from __future__ import annotations

import numpy as np
import pytest
from fakeapi import FakeKube, clusterqueue, job, workload

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.actuate.kubernetes import PRIORITY_ANNOTATION, SUSPENDED_LABEL
from balancer.model import GPU_ARRAYS, ClusterSnapshot, ScaleTraining, Workload, WorkloadClass

ELASTIC = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8"}
WORKER = Workload(name="ml/train-0", workload_class=WorkloadClass.TRAINING, namespace="ml", owner="ml/train",
                  priority=50, gpus=2, elastic_min=1, elastic_max=8)
RUNNING = ClusterSnapshot(time=0.0, nodes=(), gpus=(), workloads=(WORKER,),
                          **{name: np.zeros(0) for name in GPU_ARRAYS})
STOPPED = ClusterSnapshot(time=0.0, nodes=(), gpus=(), **{name: np.zeros(0) for name in GPU_ARRAYS})


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def queued(kube: FakeKube, *, admitted: bool = True) -> str:
    """ml/train: 4 elastic workers of 2 GPUs, queued through Kueue, running under an h100 admission (or, not
    admitted, kept suspended by Kueue); the name of its Workload."""
    spec = job("train", "ml", parallelism=4, gpus=2, queue="training-lq", suspend=not admitted)
    spec["spec"]["template"]["metadata"] = {"annotations": ELASTIC}
    wl = kube.add(workload(kube.add(spec), "h100" if admitted else None))
    return wl["metadata"]["name"]


def cohort(kube: FakeKube) -> None:
    kube.add(clusterqueue("inference", "tide", 16))
    kube.add(clusterqueue("training", "tide", 8))


def gpus(kube: FakeKube) -> tuple[int, int]:
    """GPU nominalQuota of (inference, training)."""
    return tuple(kube.get("clusterqueues", q)["spec"]["resourceGroups"][0]["flavors"][0]["resources"][1]
                 ["nominalQuota"] for q in ("inference", "training"))


def state(kube: FakeKube, wl: str) -> tuple[bool, bool | None, bool]:
    """(the Job suspended, its Workload's spec.active, the Workload admitted)."""
    w = kube.get("workloads", wl, "ml")
    return (kube.get("jobs", "train", "ml")["spec"].get("suspend"), w["spec"].get("active"),
            bool((w.get("status") or {}).get("admission")))


def suspend_patches(kube: FakeKube) -> list:
    return [r.body for r in kube.calls("PATCH", r"/jobs/train$") if "suspend" in (r.body.get("spec") or {})]


def scale(actuator: KubernetesActuator, workers: int, previous: int, snapshot: ClusterSnapshot):
    return actuator.apply(ScaleTraining(reason="tide", job="ml/train", workers=workers, previous_workers=previous),
                          snapshot)


# ---- the fake's Kueue ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("admitted", "change", "expected"),
    [
        pytest.param(True, ("jobs", {"spec": {"suspend": True}}), (False, None, True),
                     id="a suspend patched on a Job whose Workload is admitted is undone (step 7)"),
        pytest.param(False, ("jobs", {"spec": {"suspend": False}}), (True, None, False),
                     id="an unsuspend of a Job whose Workload is not admitted is undone (step 8)"),
        pytest.param(True, ("workloads", {"spec": {"active": False}}), (True, False, False),
                     id="a deactivated Workload loses its admission and its Job is suspended"),
    ],
)
def test_the_fakes_kueue_keeps_a_queued_job_as_its_workload_says(kube: FakeKube, admitted, change,
                                                                  expected) -> None:
    wl = queued(kube, admitted=admitted)
    plural, patch = change
    kube.mutate(plural, "train" if plural == "jobs" else wl, "ml", patch)
    assert state(kube, wl) == expected


def test_the_fakes_kueue_admits_a_reactivated_workload_again_and_starts_its_job(kube: FakeKube) -> None:
    wl = queued(kube)
    kube.mutate("workloads", wl, "ml", {"spec": {"active": False}})
    kube.mutate("jobs", "train", "ml", {"spec": {"suspend": False}})   # a person unsuspends it: Kueue says no
    assert state(kube, wl) == (True, False, False)
    kube.mutate("workloads", wl, "ml", {"spec": {"active": True}})
    assert state(kube, wl) == (False, True, True)


# ---- stopping and resuming through the Workload ------------------------------------------------------------------


def test_a_stopped_queued_job_stays_stopped_and_its_quota_matches_what_runs(kube: FakeKube, actuator, api) -> None:
    cohort(kube)
    wl = queued(kube)
    result = scale(actuator, 0, 4, RUNNING)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert state(kube, wl) == (True, False, False)   # Kueue evicted the Workload and suspended the Job
    assert gpus(kube) == (24, 0)                      # training's 8 GPUs went to inference, and nothing runs there
    assert f"Kueue workload {wl} deactivated" in result.detail
    assert suspend_patches(kube) == []                # Kueue's field: never written by gputide
    kube.mutate("jobs", "train", "ml", {"metadata": {"annotations": {"later": "write"}}})   # Kueue looks again
    assert state(kube, wl) == (True, False, False)
    meta = kube.get("jobs", "train", "ml")["metadata"]
    assert (meta["labels"][SUSPENDED_LABEL], meta["annotations"][PRIORITY_ANNOTATION]) == ("true", "50")
    assert [j.name for j in KubernetesWorkloads(api).suspended_jobs()] == ["train"]


def test_a_resumed_queued_job_runs_again_with_its_quota(kube: FakeKube, actuator, api) -> None:
    cohort(kube)
    wl = queued(kube)
    assert scale(actuator, 0, 4, RUNNING).outcome is Outcome.APPLIED
    result = scale(actuator, 3, 0, STOPPED)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert state(kube, wl) == (False, True, True)     # admitted again, and Kueue started the Job
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 3
    assert gpus(kube) == (18, 6)
    assert f"Kueue workload {wl} active again" in result.detail
    assert SUSPENDED_LABEL not in kube.get("jobs", "train", "ml")["metadata"]["labels"]
    assert KubernetesWorkloads(api).suspended_jobs() == ()
    assert suspend_patches(kube) == []


def test_a_queued_job_is_stopped_through_its_workload_without_kueue_queues_too(kube: FakeKube, api, sleeps) -> None:
    wl = queued(kube)
    result = KubernetesActuator(api, sleep=sleeps.append).apply(
        ScaleTraining(reason="tide", job="ml/train", workers=0, previous_workers=4), RUNNING)
    assert result.outcome is Outcome.APPLIED, result.detail
    assert state(kube, wl) == (True, False, False)
    assert not kube.calls("GET", r"/clusterqueues/") and suspend_patches(kube) == []


def test_a_queued_job_without_a_workload_is_not_stopped(kube: FakeKube, actuator) -> None:
    cohort(kube)
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    result = scale(actuator, 0, 4, RUNNING)
    assert result.outcome is Outcome.FAILED
    assert "job ml/train is queued through Kueue" in result.detail and "no Workload" in result.detail
    got = kube.get("jobs", "train", "ml")
    assert got["spec"]["suspend"] is False and SUSPENDED_LABEL not in got["metadata"]["labels"]
    assert gpus(kube) == (16, 8) and not kube.calls("PATCH", r"/(jobs|clusterqueues)/")


def test_a_workload_that_cannot_be_deactivated_leaves_the_job_running_unlabelled(kube: FakeKube, actuator,
                                                                                 api) -> None:
    cohort(kube)
    wl = queued(kube)
    kube.inject("PATCH", r"/workloads/", 403)
    result = scale(actuator, 0, 4, RUNNING)
    assert result.outcome is Outcome.FAILED and "403" in result.detail
    assert state(kube, wl) == (False, None, True) and gpus(kube) == (16, 8)
    assert SUSPENDED_LABEL not in kube.get("jobs", "train", "ml")["metadata"]["labels"]
    assert KubernetesWorkloads(api).suspended_jobs() == ()


def test_a_failed_reactivation_keeps_the_job_findable_and_gives_the_quota_back(kube: FakeKube, actuator,
                                                                               api) -> None:
    cohort(kube)
    wl = queued(kube)
    assert scale(actuator, 0, 4, RUNNING).outcome is Outcome.APPLIED
    kube.inject("PATCH", r"/workloads/", 403)
    result = scale(actuator, 4, 0, STOPPED)
    assert result.outcome is Outcome.FAILED
    assert state(kube, wl) == (True, False, False) and gpus(kube) == (24, 0)
    assert [j.name for j in KubernetesWorkloads(api).suspended_jobs()] == ["train"]   # the next cycle retries


def test_a_labelled_job_kueue_keeps_running_is_not_listed_as_suspended(kube: FakeKube, api) -> None:
    """What the old actuator left behind (label and `suspend: true` patched, undone by Kueue): running, so not
    suspended, whatever the label says."""
    wl = queued(kube)
    kube.mutate("jobs", "train", "ml", {"metadata": {"labels": {SUSPENDED_LABEL: "true"}}, "spec": {"suspend": True}})
    assert state(kube, wl) == (False, None, True)
    assert KubernetesWorkloads(api).suspended_jobs() == ()
