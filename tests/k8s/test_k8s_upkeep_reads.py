"""A housekeeping cycle read the two Kueue ClusterQueues six times: the settle of each queue read it and its
borrower, the drift check both again, each read an API GET, every cycle (30 s) and shard. The settles now read each
queue once (`KueueQuota.reads_once`) and again only once they wrote to it, so nothing is settled on an object older
than its own last write; a write still reads afresh and carries that read's resourceVersion, and the next cycle reads
anew. The drift check reads afresh (audit a5): a peer's correction landing after the settles' reads was given back a
second time."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_quota_restart import QUEUES, Died, cohort, controller, dies_at, quota, scale

from balancer.actuate.base import Outcome


def queue_requests(kube: FakeKube) -> list[tuple[str, str]]:
    """(method, queue) of each ClusterQueue request since the log was last cleared, in order."""
    return [(r.method, r.path.rpartition("/")[2]) for r in kube.requests if "/clusterqueues/" in r.path]


def test_a_cycle_reads_each_queue_once_for_its_settles_once_for_its_check_and_the_next_cycle_anew(
        kube: FakeKube, api, clock, sleeps):
    cohort(kube)
    ctl = controller(api, clock, sleeps)
    assert scale(ctl, 6).outcome is Outcome.APPLIED and quota(kube) == (12, 12)          # a move inference -> training
    assert scale(ctl, 4, previous=6).outcome is Outcome.APPLIED and quota(kube) == (16, 8)   # and one back
    for _ in range(2):   # each queue holds a move's record: each settle looks at its borrower too
        kube.requests.clear()
        assert not [note for note in ctl.housekeeping() if "kueue" in note]
        assert sorted(queue_requests(kube)) == [("GET", "inference")] * 2 + [("GET", "training")] * 2


def test_a_queue_a_settle_wrote_is_read_again_once_before_the_cycle_looks_at_it_again(kube: FakeKube, api, clock,
                                                                                      sleeps):
    cohort(kube)
    mover = controller(api, clock, sleeps)
    dies_at(mover, "training", landed=False)   # inference lowered for the grow, training never raised
    with pytest.raises(Died):
        scale(mover, 6)
    assert quota(kube) == (12, 8)
    kube.requests.clear()
    notes = controller(api, clock, sleeps).housekeeping()
    assert any("rolled back" in note for note in notes), notes   # training noted void, inference given it back
    assert quota(kube) == (16, 8)
    seen = queue_requests(kube)
    check = seen[-2:]   # the drift check reads both afresh, last
    assert sorted(check) == [("GET", "inference"), ("GET", "training")], seen
    # each written by a settle, read afresh for the write: training, written first, is read once more by the settle
    # that looks at it next (not its stale copy, not twice); inference, written last, by the drift check alone
    after = {q: seen[max(i for i, req in enumerate(seen) if req == ("PATCH", q)) + 1:-2].count(("GET", q))
             for q in QUEUES}
    assert after == {"inference": 0, "training": 1}, seen
