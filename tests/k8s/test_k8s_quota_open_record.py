"""A Kueue quota move must not overwrite another controller's open move on the lender. Two shards move quota
between the same ClusterQueues: shard A lowers inference by 2 (its record, move M1, on inference) and dies before
raising training; shard B, which read inference before A's write landed, then lowered it again in a patch whose
record replaced M1's. Nothing recorded M1 any more: no settle raised training for it, and A's own rollback (`_close`)
found another id and gave nothing back: the queues ended (12, 10), the cohort 2 GPUs short for good. A lender's
record is now replaced only once its move is settled; one still open is a temporary error for B (nothing written),
and the next settle finishes M1."""

from __future__ import annotations

import functools

import pytest
from fakeapi import FakeKube
from test_k8s_quota_restart import QUEUES, cohort, controller, quota

from balancer.actuate.k8s_transfer import Transfer
from balancer.actuate.kubernetes import KubeTemporaryError


def others_move_lands_first(mover, other) -> None:
    """`other`'s lend (move M1, inference -> training, 2 GPUs) lands after `mover` read and settled the queues, just
    before `mover`'s own lend; `other` then dies before raising training."""
    real = mover.kueue._lend

    @functools.wraps(real)
    def lend(*args, **kwargs):
        other.kueue._lend("inference", Transfer("m1aaaaaaaaaa", "training", "h100", 2))
        mover.kueue._lend = real
        return real(*args, **kwargs)

    mover.kueue._lend = lend


def test_a_move_never_overwrites_another_controllers_open_move(kube: FakeKube, api, clock, sleeps) -> None:
    cohort(kube)   # inference 16, training 8: 24 in the cohort
    a, b = controller(api, clock, sleeps), controller(api, clock, sleeps)
    others_move_lands_first(b, a)
    with pytest.raises(KubeTemporaryError, match="open move m1aaaaaaaaaa"):
        b.shift_kueue_quota("inference", "training", 2)
    assert quota(kube) == (14, 8)   # only A's lend: B wrote nothing
    assert controller(api, clock, sleeps).kueue.settle_all(QUEUES)   # a restarted controller finishes M1
    assert quota(kube) == (14, 10)
    b.shift_kueue_quota("inference", "training", 2)   # the next cycle moves
    assert quota(kube) == (12, 12)

