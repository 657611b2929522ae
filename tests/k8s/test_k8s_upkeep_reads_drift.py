"""The drift check reads the Kueue ClusterQueues afresh, not as the housekeeping cycle's settles read them
(`KueueQuota.reads_once`, 5640c70): its excess is decided on that read and its write (`shift`) is fenced only by what
training's Jobs hold, so a peer shard's correction landing after the settles' reads was given back a second time,
out of training's own quota (audit a5)."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_quota_drift import admitted_at, cohort, controller, grow_that_dies, quota

from balancer.actuate.k8s_budget import ACTION_DEADLINE_S


def test_a_peers_correction_since_the_settles_read_is_not_given_back_again(kube: FakeKube, api, clock, sleeps):
    """4 GPUs lent for a grow whose Job resize never came, training's Jobs holding 4 of its 12: shards A and B both
    see the excess; B's correction lands after A's settles read the queues and before A's drift check. A gives
    nothing back again (it gave the same 4 a second time, out of training's own quota: (20, 4))."""
    cohort(kube)
    grow_that_dies(api, clock, sleeps)
    assert quota(kube) == (12, 12)
    kube.mutate("jobs", "train", "ml", {"spec": {"parallelism": 2}})
    admitted_at(kube, "train", 2)
    a, b = controller(api, clock, sleeps), controller(api, clock, sleeps)
    a.housekeeping()
    b.housekeeping()   # both see the excess
    clock.advance(ACTION_DEADLINE_S)
    pay = a.kueue._pay

    def peer_first(queues):   # after A's settles, before its check
        a.kueue._pay = pay
        b.housekeeping()
        assert quota(kube) == (16, 8)
        return pay(queues)

    a.kueue._pay = peer_first
    a.housekeeping()
    assert quota(kube) == (16, 8)
