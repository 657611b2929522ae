"""A housekeeping cycle read the two Kueue ClusterQueues six times: the settle of each queue read it and its
borrower, the drift check both again, each read an API GET, every cycle (30 s) and shard. The cycle now reads each
queue once (`KueueQuota.reads_once`) and again only once it wrote to it (a settle's or a correction's patch), so
nothing is settled or checked on an object older than its own last write; a write still reads afresh and carries
that read's resourceVersion, and the next cycle reads anew."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube
from test_k8s_quota_restart import QUEUES, Died, cohort, controller, dies_at, quota, scale

from balancer.actuate.base import Outcome


def queue_requests(kube: FakeKube) -> list[tuple[str, str]]:
    """(method, queue) of each ClusterQueue request since the log was last cleared, in order."""
    return [(r.method, r.path.rpartition("/")[2]) for r in kube.requests if "/clusterqueues/" in r.path]


def test_a_cycle_reads_each_queue_once_and_the_next_cycle_anew(kube: FakeKube, api, clock, sleeps):
    cohort(kube)
    ctl = controller(api, clock, sleeps)
    assert scale(ctl, 6).outcome is Outcome.APPLIED and quota(kube) == (12, 12)          # a move inference -> training
    assert scale(ctl, 4, previous=6).outcome is Outcome.APPLIED and quota(kube) == (16, 8)   # and one back
    for _ in range(2):   # each queue holds a move's record: each settle looks at its borrower too
        kube.requests.clear()
        assert not [note for note in ctl.housekeeping() if "kueue" in note]
        assert sorted(queue_requests(kube)) == [("GET", "inference"), ("GET", "training")]


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
    for queue in QUEUES:   # each written by the settle: read afresh for the write, then once for the cycle's next look
        written = max(i for i, req in enumerate(seen) if req == ("PATCH", queue))
        assert seen[written + 1:].count(("GET", queue)) == 1, seen
