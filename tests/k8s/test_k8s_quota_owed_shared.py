"""An owed Kueue give-back (a shrink whose lowering of training failed, `KueueQuota.owed`) lives in one controller's
memory, while the ClusterQueues are shared with the other shards on the cohort and with the next leader, which know
nothing of it. It used to be made as owed whatever they did meanwhile, so it was paid twice:

* A's lowering landed unanswered; B's housekeeping completed the move from its record, then B shrank (its record
  replacing A's): A's housekeeping lent the same GPUs again, (26, 6) instead of (22, 10);
* A owed 8 of which 4 were lent to training; B's drift check gave those 4 back, then A paid all 8: (24, 0) while the
  Job still held 4;
* with Kueue's status reserving the Job's 4, A's payment was refused every cycle ("would keep 0"), A owed 8 for good
  and A's own drift check, which deferred to the debt, never ran again.

Now a debt whose lowering may have landed is dropped once training's record shows another move since (made where
training's move history shows it never landed), and a payment
takes only what training holds beyond its Jobs' needs (`k8s_quota_drift.spare`), the part its Jobs hold dropped once
held so for the action deadline."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube, clusterqueue, job
from test_k8s_quota_drift import admitted_at
from test_k8s_quota_drift import cohort as drift_cohort
from test_k8s_quota_drift import controller as drift_controller
from test_k8s_quota_drift import scale as drift_scale
from test_k8s_quota_owed_lender import reserving, unanswered_lowering
from test_k8s_quota_restart import cohort, controller, quota, scale

from balancer.actuate.base import Outcome
from balancer.actuate.k8s_budget import ACTION_DEADLINE_S
from balancer.actuate.k8s_quota_owed import _lowered
from balancer.actuate.k8s_quota_writes import MOVES_KEPT


def test_a_landed_lowering_another_shard_completed_is_not_given_back_again(kube: FakeKube, api, clock,
                                                                         sleeps) -> None:
    kube.add(clusterqueue("inference", "tide", 16, lending=14))
    kube.add(clusterqueue("training", "tide", 16))
    kube.add(job("train", "ml", parallelism=4, gpus=2, queue="training-lq"))
    a, b = controller(api, clock, sleeps), controller(api, clock, sleeps)   # two shards, the same queues
    tries = unanswered_lowering(a)
    assert scale(a, 2).outcome is Outcome.APPLIED   # frees 4: training lowered, A never told
    assert quota(kube) == (16, 12) and a.kueue.owes("training") == 4
    tries.extend([True] * 10)                       # the API healthy again
    b.housekeeping()                                # B completes A's move from its record
    assert quota(kube) == (20, 12)
    assert scale(b, 1, previous=2).outcome is Outcome.APPLIED   # frees 2; B's record replaces A's on training
    assert quota(kube) == (22, 10)
    assert any("dropped" in note for note in a.housekeeping())
    assert quota(kube) == (22, 10) and a.kueue.owes("training") == 0   # 6 freed in all, given back once


def test_an_unanswered_lowering_that_did_not_land_is_still_made(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs
    c = controller(api, clock, sleeps)
    tries = unanswered_lowering(c, landed=False)
    assert scale(c, 2).outcome is Outcome.APPLIED
    assert quota(kube) == (16, 8)
    tries.extend([True] * 10)
    c.housekeeping()
    assert quota(kube) == (20, 4) and c.kueue.owes("training") == 0


def test_an_unanswered_lowering_that_did_not_land_is_made_after_another_shards_move(kube: FakeKube, api, clock,
                                                                                   sleeps) -> None:
    """A's lowering got no answer and did not land; B then shrank (its record the last on training). The debt was
    dropped as if B's record had replaced A's, and training kept the 4 GPUs A's shrink freed: (18, 6) while the Job
    held 2. Training's move history (`gputide.io/quota-moves`) shows A's move never landed: it is made."""
    cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs
    a, b = controller(api, clock, sleeps), controller(api, clock, sleeps)
    tries = unanswered_lowering(a, landed=False)
    assert scale(a, 2).outcome is Outcome.APPLIED   # frees 4: nothing lowered, A never told
    assert quota(kube) == (16, 8) and a.kueue.owes("training") == 4
    tries.extend([True] * 10)
    assert scale(b, 1, previous=2).outcome is Outcome.APPLIED   # frees 2; B's record the last on training
    assert quota(kube) == (18, 6)
    assert not any("dropped" in note for note in a.housekeeping())
    assert quota(kube) == (22, 2) and a.kueue.owes("training") == 0


def owing_shrink(kube: FakeKube, a) -> None:
    """Training lent 4 for a grow (4 -> 6 workers), then the Job shrunk to 2 and lowering training by the 8 freed
    failed: A owes 8, 4 of them lent to training, and the queues stand at (12, 12)."""
    assert drift_scale(a, 6).outcome is Outcome.APPLIED and quota(kube) == (12, 12)
    admitted_at(kube, "train", 6)
    kube.inject("PATCH", r"/clusterqueues/training$", 500, count=4)
    assert drift_scale(a, 2, previous=6).outcome is Outcome.APPLIED and quota(kube) == (12, 12)
    admitted_at(kube, "train", 2)
    assert a.kueue.owes("training") == 8


def test_another_shards_drift_check_gave_part_back_the_debt_makes_only_the_rest(kube: FakeKube, api, clock,
                                                                              sleeps) -> None:
    drift_cohort(kube)   # inference 16, training 8; the Job: 4 workers x 2 GPUs, admitted
    a, b = drift_controller(api, clock, sleeps), drift_controller(api, clock, sleeps)
    owing_shrink(kube, a)
    for _ in range(2):   # B's check sees the 4 lent and held by no Job, and gives them back
        b.housekeeping()
        clock.advance(ACTION_DEADLINE_S)
    assert quota(kube) == (16, 8)
    a.housekeeping()
    assert quota(kube) == (20, 4)   # the 8 freed given back once; the Job's 2 workers x 2 GPUs covered


def test_a_debt_training_cannot_pay_is_dropped_and_the_drift_check_runs(kube: FakeKube, api, clock, sleeps) -> None:
    drift_cohort(kube)
    a, b = drift_controller(api, clock, sleeps), drift_controller(api, clock, sleeps)
    owing_shrink(kube, a)
    kube.mutate("clusterqueues", "training", "", reserving(4))   # Kueue: the Job's 2 x 2 GPUs reserved
    for _ in range(2):
        b.housekeeping()
        clock.advance(ACTION_DEADLINE_S)
    assert quota(kube) == (16, 8)
    a.housekeeping()
    assert quota(kube) == (20, 4) and a.kueue.owes("training") == 4   # the rest held by the Job: not yet dropped
    clock.advance(ACTION_DEADLINE_S)
    assert any("dropped" in note for note in a.housekeeping())
    assert quota(kube) == (20, 4) and a.kueue.owes("training") == 0
    # A's own drift check runs again: a grow's loan left behind by a resize undone by hand goes back
    # (training gave 4 of its own: 4 of the grow's 8 are a loan)
    assert drift_scale(a, 6, previous=2).outcome is Outcome.APPLIED and quota(kube) == (12, 12)
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 2}})
    for _ in range(2):
        a.housekeeping()
        clock.advance(ACTION_DEADLINE_S)
    assert quota(kube) == (16, 8)


@pytest.mark.parametrize(("before", "moves", "landed"), [
    pytest.param("m0", None, None, id="no history (an older gputide's records): cannot say"),
    pytest.param("m0", ["m0", "a", "b"], True, id="its id in the history: landed"),
    pytest.param("m0", ["m0", "b"], False, id="the history covers what came after: did not land"),
    pytest.param("m0", [f"m{i}" for i in range(1, MOVES_KEPT + 1)], None, id="its move before dropped: cannot say"),
    pytest.param(None, ["b"], False, id="no history then, none dropped since: did not land"),
    pytest.param(None, [f"m{i}" for i in range(MOVES_KEPT)], None, id="no history then, full since: cannot say"),
])
def test_whether_a_lowering_landed_by_the_lenders_move_history(before, moves, landed) -> None:
    assert _lowered("a", before, moves) is landed
