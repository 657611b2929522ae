"""A preemptor's memory of each victim is one record per (pending pod, node, victim) (`k8s_preempt_doubts`): the
doubt of an unanswered eviction and when it was asked go together, a preemption's end drops its doubts and counts in
one place (`Doubts.prune`) while a pass-over outlives it until it runs out. Before, four maps keyed alike were each
pruned by hand, free to drift apart."""

from __future__ import annotations

from balancer.actuate.k8s_preempt_doubts import NEVER, Doubts


def test_an_ended_preemption_loses_its_doubts_and_counts_but_not_its_pass_over():
    doubts = Doubts()
    doubts.set("default/urgent", "a", "default/p", uid="u1", asked_at=100.0, counted="u1", asks=2)
    doubts.set("default/urgent", "a", "default/q", over_until=400.0, over_for="u9")
    doubts.set("default/other", "a", "default/p", uid="u1", asked_at=90.0)
    doubts.prune(200.0, lambda key, node: key == "default/urgent")
    p = doubts.get("default/urgent", "a", "default/p")
    assert (p.uid, p.asked_at, p.count) == (None, NEVER, None)          # the doubt and its asked-at time together
    assert doubts.get("default/urgent", "a", "default/q").over_until == 400.0   # kept: the plan asks it
    assert doubts.unsure() == {("default/other", "a"): {"default/p": "u1"}}     # another preemption's stays
    assert doubts.passed_over("default/urgent", "u9", 200.0) == {("a", "default/q"): 400.0}
    assert doubts.passed_over("default/urgent", "u10", 200.0) == {}       # another pod of its name
    doubts.prune(400.0)                                                 # run out: nothing left of it
    assert doubts.passed_over("default/urgent", "u9", 400.0) == {}
    assert doubts._by.keys() == {("default/other", "a", "default/p")}   # records that say nothing are dropped


def test_doubts_are_read_in_the_order_they_were_made():
    """A victim asked again (its doubt forgotten, then made anew) is read after those doubted since, as its count
    kept its record: the order `Preemptor.release` counts landed evictions in is the order they were asked."""
    doubts = Doubts()
    doubts.set("k", "a", "v1", uid="1", asked_at=1.0, counted="1", asks=1)
    doubts.set("k", "a", "v2", uid="2", asked_at=2.0)
    doubts.set("k", "a", "v1", uid=None, asked_at=NEVER)                # overtaken by the eviction asked now
    doubts.set("k", "a", "v1", uid="1", asked_at=3.0)
    assert doubts.doubted("k", "a") == ["v2", "v1"]
    assert doubts.doubting("a", "v1", "1") == ["k"] and doubts.doubting("a", "v1", "other") == []
