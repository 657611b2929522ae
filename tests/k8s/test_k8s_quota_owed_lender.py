"""A shrink's quota give-back whose first half failed is owed, not dropped. A shrink stops the Job's workers, then
lowers training's nominalQuota (its record of the move in that patch) and raises inference's. When the lowering
itself failed (API trouble), nothing moved and the action was applied with "quota NOT given back ... still
training's": nothing ever moved it again (the drift check gives back only quota gputide lent to training, and a retry
finds the Job shrunk already), so the queues stayed (16, 8) instead of (20, 4). The give-back is now owed in the
controller's memory (`KueueQuota.owed`) and made by the next housekeeping (`settle_all`, every cycle), within what
training holds beyond its Jobs' needs; a lowering that landed without an answer is completed from its record, never
made twice (test_k8s_quota_owed_shared.py: the other shards' part)."""

from __future__ import annotations

import functools

import pytest
import urllib3
from fakeapi import FakeKube
from kubernetes.client.exceptions import ApiException
from test_k8s_quota_drift import admitted_at
from test_k8s_quota_drift import cohort as drift_cohort
from test_k8s_quota_drift import controller as drift_controller
from test_k8s_quota_drift import scale as drift_scale
from test_k8s_quota_restart import cohort, controller, quota, scale

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_budget import ACTION_DEADLINE_S


@pytest.mark.parametrize(("grow", "after"), [
    pytest.param(None, (20, 4), id="the next housekeeping makes it"),
    pytest.param(3, (18, 6), id="a grow before housekeeping moves its own quota only, housekeeping makes the rest"),
])
def test_a_shrinks_give_back_whose_lowering_failed_is_made_by_housekeeping(kube: FakeKube, api, clock, sleeps, grow,
                                                                          after) -> None:
    cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs
    c = controller(api, clock, sleeps)
    kube.inject("PATCH", r"/clusterqueues/training$", 500, count=10)   # lowering training fails, for a while
    result = scale(c, 2)
    assert result.outcome is Outcome.APPLIED, result   # the workers are stopped: the budgets count it
    assert "owed" in result.detail, result.detail
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 2
    assert quota(kube) == (16, 8)   # nothing moved yet
    kube.faults.clear()             # the API healthy again
    if grow:
        assert scale(c, grow, previous=2).outcome is Outcome.APPLIED   # 2 GPUs more to training: (14, 10)
    assert any("owed" in note for note in c.housekeeping())
    assert quota(kube) == after
    assert not any("kueue" in note for note in c.housekeeping())   # once: nothing left owed


def test_a_give_back_still_failing_stays_owed(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)
    c = controller(api, clock, sleeps)
    kube.inject("PATCH", r"/clusterqueues/training$", 500, count=1000)
    assert scale(c, 2).outcome is Outcome.APPLIED
    assert any("still owed" in note for note in c.housekeeping())
    assert quota(kube) == (16, 8)
    kube.faults.clear()
    c.housekeeping()
    assert quota(kube) == (20, 4)


def test_a_lowering_that_landed_unanswered_is_given_back_once(kube: FakeKube, api, clock, sleeps) -> None:
    """Training's patch lands but its answer is lost, and every retry fails: the move's record is on training, the
    next settle completes it, and the owed give-back (the same move) takes nothing a second time."""
    cohort(kube)
    c = controller(api, clock, sleeps)
    tries = unanswered_lowering(c)
    result = scale(c, 2)
    assert result.outcome is Outcome.APPLIED, result
    assert quota(kube) == (16, 4)   # landed: training lowered, inference not raised
    tries.extend([True] * 10)       # the API healthy again
    c.housekeeping()
    assert quota(kube) == (20, 4)
    c.housekeeping()
    assert quota(kube) == (20, 4)


def test_the_owed_give_back_waits_for_kueues_status_and_the_drift_check_takes_nothing_twice(kube: FakeKube, api,
                                                                                            clock, sleeps) -> None:
    """Training was lent 4 for a grow (4 -> 6 workers), then the Job shrank to 2 and lowering training by the 8 freed
    failed. While training's Workloads still reserve 8 the owed give-back makes the 4 that leaves and the rest waits;
    the drift check, which gives back quota lent to training beyond what its Jobs hold, finds none lent any more
    (the give-back took it), and must not give back 4 more: both would leave training at 0 (24, 0)."""
    drift_cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs, admitted
    c = drift_controller(api, clock, sleeps)
    assert drift_scale(c, 6).outcome is Outcome.APPLIED and quota(kube) == (12, 12)
    admitted_at(kube, "train", 6)
    kube.inject("PATCH", r"/clusterqueues/training$", 500, count=4)   # the shrink's lowering fails, every try
    assert drift_scale(c, 2, previous=6).outcome is Outcome.APPLIED and quota(kube) == (12, 12)
    admitted_at(kube, "train", 2)
    kube.mutate("clusterqueues", "training", "", reserving(8))   # Kueue's status not caught up yet
    for _ in range(3):
        assert any("still owed" in note for note in c.housekeeping())
        clock.advance(ACTION_DEADLINE_S)
    assert quota(kube) == (16, 8) and c.kueue.owes("training") == 4
    kube.mutate("clusterqueues", "training", "", reserving(4))
    c.housekeeping()
    assert quota(kube) == (20, 4)
    clock.advance(ACTION_DEADLINE_S)
    assert not any("kueue" in note for note in c.housekeeping()) and quota(kube) == (20, 4)


def unanswered_lowering(actuator, landed: bool = True) -> list:
    """The actuator's first patch of training gets no answer (applied first when `landed`); its retries fail (500)
    until the list returned is given 10 more items."""
    real, tries = actuator.api.custom.patch_cluster_custom_object, []

    @functools.wraps(real)   # keeps its name: the gateway knows a write by it
    def patch(*args, **kwargs):
        if args[3] != "training" or len(tries) > 10:
            return real(*args, **kwargs)
        tries.append(True)
        if len(tries) == 1:
            if landed:
                real(*args, **kwargs)
            raise urllib3.exceptions.ReadTimeoutError(None, "/", "Read timed out. (read timeout=10.0)")
        raise ApiException(status=500, reason="Internal Server Error")

    actuator.api.custom.patch_cluster_custom_object = patch
    return tries


def reserving(gpus: int) -> dict:
    return {"status": {"flavorsReservation": [{"name": "h100", "resources": [{"name": "nvidia.com/gpu",
                                                                            "total": gpus}]}]}}
