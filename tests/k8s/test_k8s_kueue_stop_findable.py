"""A queued Job gputide stopped stays findable (`gputide.io/suspended`, `KubernetesWorkloads.suspended_jobs`) until
it runs again. The stop removed the label after a Workload deactivation that got no answer, though it had landed,
and the resume removed it before the Workload was active again: a failure or a restart in between left the Job
suspended by Kueue, its Workload inactive, and nothing that would ever resume it. The stop now reads the Workloads
back when the outcome is unknown, and the resume removes the label only once the Workloads are active."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_kueue_stop import RUNNING, STOPPED, cohort, gpus, queued, scale, state
from test_k8s_unknown_outcome import no_answer

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_actuator import KubernetesActuator
from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.actuate.kubernetes import SUSPENDED_LABEL


@pytest.fixture
def actuator(api, clock, sleeps) -> KubernetesActuator:
    return KubernetesActuator(api, sleep=sleeps.append, clock=clock, kueue_queues=("inference", "training"))


def label(kube: FakeKube) -> str | None:
    return (kube.get("jobs", "train", "ml")["metadata"].get("labels") or {}).get(SUSPENDED_LABEL)


def suspended(api) -> list[str]:
    return [j.name for j in KubernetesWorkloads(api).suspended_jobs() or ()]


class Killed(BaseException):
    """The controller dies (SIGKILL, OOM): no handler runs."""


def test_a_deactivation_that_landed_unanswered_keeps_the_job_labelled(kube: FakeKube, actuator, api) -> None:
    cohort(kube)
    wl = queued(kube)
    custom = actuator.api.custom
    custom.patch_namespaced_custom_object = no_answer(
        custom.patch_namespaced_custom_object, lambda: kube.mutate("workloads", wl, "ml", {"spec": {"active": False}}))
    result = scale(actuator, 0, 4, RUNNING)
    assert result.outcome is Outcome.APPLIED, result.detail   # read back: it landed
    assert state(kube, wl) == (True, False, False) and label(kube) == "true"
    assert suspended(api) == ["train"] and gpus(kube) == (24, 0)


def test_a_deactivation_unanswered_that_did_not_land_leaves_the_job_running_unlabelled(kube: FakeKube, actuator,
                                                                                       api) -> None:
    cohort(kube)
    wl = queued(kube)
    custom = actuator.api.custom
    custom.patch_namespaced_custom_object = no_answer(custom.patch_namespaced_custom_object)
    result = scale(actuator, 0, 4, RUNNING)
    assert result.outcome is Outcome.RETRY and result.maybe_applied
    assert state(kube, wl) == (False, None, True) and label(kube) is None and gpus(kube) == (16, 8)


def test_a_deactivation_unanswered_and_not_read_back_keeps_the_label(kube: FakeKube, actuator, api) -> None:
    cohort(kube)
    wl = queued(kube)
    custom = actuator.api.custom
    custom.patch_namespaced_custom_object = no_answer(
        custom.patch_namespaced_custom_object, lambda: (kube.mutate("workloads", wl, "ml", {"spec": {"active": False}}),
                                                        kube.inject("GET", r"/workloads", 500, count=20)))
    result = scale(actuator, 0, 4, RUNNING)
    assert result.outcome is Outcome.RETRY and result.maybe_applied
    assert state(kube, wl) == (True, False, False) and label(kube) == "true" and suspended(api) == ["train"]


def test_a_controller_killed_before_the_reactivation_leaves_the_job_findable(kube: FakeKube, actuator, api) -> None:
    cohort(kube)
    wl = queued(kube)
    assert scale(actuator, 0, 4, RUNNING).outcome is Outcome.APPLIED

    def killed(*_args, **_kwargs):
        raise Killed

    actuator.training.kueue.set_active = killed
    with pytest.raises(Killed):
        scale(actuator, 3, 0, STOPPED)
    assert state(kube, wl) == (True, False, False) and label(kube) == "true"
    assert suspended(api) == ["train"]   # the next controller resumes it


def test_a_failed_reactivation_whose_relabel_would_fail_too_keeps_the_job_findable(kube: FakeKube, actuator,
                                                                                  api) -> None:
    cohort(kube)
    wl = queued(kube)
    assert scale(actuator, 0, 4, RUNNING).outcome is Outcome.APPLIED
    kube.inject("PATCH", r"/workloads/", 500, count=20)
    kube.before("PATCH", r"/workloads/", lambda: kube.inject("PATCH", r"/jobs/train$", 500, count=20))
    result = scale(actuator, 3, 0, STOPPED)
    assert result.outcome is Outcome.RETRY
    assert state(kube, wl) == (True, False, False) and label(kube) == "true"
    assert suspended(api) == ["train"] and gpus(kube) == (24, 0)


def test_a_label_left_on_a_resumed_job_is_a_note_not_a_failure(kube: FakeKube, actuator, api) -> None:
    cohort(kube)
    wl = queued(kube)
    assert scale(actuator, 0, 4, RUNNING).outcome is Outcome.APPLIED
    kube.before("PATCH", r"/workloads/", lambda: kube.inject("PATCH", r"/jobs/train$", 403, count=20))
    result = scale(actuator, 4, 0, STOPPED)
    assert result.outcome is Outcome.APPLIED and f"label {SUSPENDED_LABEL} NOT removed" in result.detail
    assert state(kube, wl) == (False, True, True) and suspended(api) == []   # running: not listed
