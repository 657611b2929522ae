"""Two live controllers on one Kueue cohort (shards of `gputide run --shard`, each with --kueue-queues): one's
housekeeping may settle the other's quota move while it is under way, between its two writes. A grow's move found
open is rolled back (the training queue noted "void", the lender given its quota back); the mover's raise then
found the move noted already and went on as if it had landed: the Job grew with no quota lent for it. A move voided
under it is now a temporary error: nothing grows, and the next cycle moves again."""

from __future__ import annotations

import functools

from fakeapi import FakeKube
from test_k8s_quota_restart import QUEUES, cohort, controller, quota, scale

from balancer.actuate.base import Outcome


def test_a_grow_whose_move_another_controller_voided_midway_does_not_grow(kube: FakeKube, api, clock, sleeps):
    cohort(kube)
    mover, other = controller(api, clock, sleeps), controller(api, clock, sleeps)
    real = mover.kueue._lend

    @functools.wraps(real)
    def lend_then_other_settles(*args, **kwargs):
        real(*args, **kwargs)
        other.kueue.settle_all(QUEUES)   # the other shard's housekeeping runs between the two writes

    mover.kueue._lend = lend_then_other_settles
    result = scale(mover, 6)
    assert result.outcome is not Outcome.APPLIED, result
    assert kube.get("jobs", "train", "ml")["spec"]["parallelism"] == 4   # no grow without its quota
    assert quota(kube) == (16, 8)                                        # and no quota lost either
    mover.kueue._lend = real
    assert scale(mover, 6).outcome is Outcome.APPLIED and quota(kube) == (12, 12)   # the next cycle moves again
