"""A shrink's quota give-back that fails is owed, not dropped. A shrink stops the Job's workers first and then moves
the quota it freed from training back to inference; when raising inference failed (API trouble), the move was rolled
back and the action applied with "quota NOT given back": nothing ever moved that quota again (the drift check gives
back only quota gputide lent to training, and a retry finds the Job shrunk already). The queues stayed (16, 8)
instead of (20, 4). Such a give-back is now left open on training (its record written with the lowering), and the
next settle (housekeeping, every cycle, or the next move) raises inference; never rolled back."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_quota_restart import cohort, controller, quota, scale

from balancer.actuate.base import Outcome


def test_a_shrinks_failed_give_back_is_completed_by_housekeeping(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs
    c = controller(api, clock, sleeps)
    kube.inject("PATCH", r"/clusterqueues/inference$", 500, count=10)   # raising inference fails, for a while
    result = scale(c, 2)
    assert result.outcome is Outcome.APPLIED, result   # the workers are stopped: the budgets count it
    assert "next settle complete it" in result.detail
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 2
    assert quota(kube) == (16, 4)   # training lowered, its record owes inference the 4 GPUs
    kube.faults.clear()             # the API healthy again
    assert any("completed" in note for note in c.housekeeping())
    assert quota(kube) == (20, 4)
    assert not any("kueue" in note for note in c.housekeeping())   # once: nothing left to settle


def test_a_later_move_completes_the_owed_give_back_first(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)
    c = controller(api, clock, sleeps)
    kube.inject("PATCH", r"/clusterqueues/inference$", 500, count=10)
    assert scale(c, 2).outcome is Outcome.APPLIED
    kube.faults.clear()
    result = scale(c, 3, previous=2)   # a grow: the give-back completed before its own move
    assert result.outcome is Outcome.APPLIED, result
    assert quota(kube) == (18, 6)
