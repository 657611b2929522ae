"""A preemption whose eviction fails after earlier victims were evicted keeps the node held for the preemptor while
they terminate, and evicts the victims left at the next passes (written on its reservation, so a new leader does
too). It gave the node back: the room the evicted victims freed went to whoever came first (here a pod as important
that may not preempt), the preemptor planned afresh elsewhere and more pods were killed, the first ones for no
one. An eviction refused before anyone was evicted still gives the node back (nothing was done)."""

from __future__ import annotations

from fakeapi import FakeKube, node, pdb
from test_k8s_preemption import bound, most_free, pending, reservations

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def two_nodes(kube: FakeKube) -> None:
    """a: low-1 (guarded by a budget: evicted first) and low-2; b: low-3, more important, alone."""
    kube.add(pdb("guard", "default", {"tier": "batch"}, 1))
    kube.add(node("a", 8))
    kube.add(bound("low-1", "a", 4, 1, labels={"tier": "batch"}))
    kube.add(bound("low-2", "a", 4, 2))
    kube.add(node("b", 8))
    kube.add(bound("low-3", "b", 8, 3))
    kube.add(pending("urgent", 8, 50))


def test_an_eviction_failing_half_way_keeps_the_node_and_evicts_the_rest_later(kube: FakeKube, api, clock):
    two_nodes(kube)
    kube.inject("POST", r"/pods/low-2/eviction$", 429, count=2)   # refused twice (a budget, the API), then allowed
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert kube.get("pods", "low-1", "default") is None and sched.preempted == [("default/low-1", "a")]
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2"]
    assert "a stays held" in sched.reasons["default/urgent"]

    kube.add(pending("sneaky", 4, 50, preemptionPolicy="Never"))  # would take the room low-1 left (turn first by name)
    clock.advance(5)
    assert sched.schedule_once() == {"default/sneaky": None, "default/urgent": None}
    assert "reserved for other pods" in sched.reasons["default/sneaky"]
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2"]   # refused again: retried
    assert kube.get("pods", "low-3", "default") is not None and sched.preempted == []

    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/low-2", "a")] and "victims" not in reservations(kube, "a")["default/urgent"]
    clock.advance(5)
    assert sched.schedule_once() == {"default/sneaky": None, "default/urgent": "a"}
    assert kube.get("pods", "low-3", "default") is not None        # no one else was killed for urgent
    assert len(kube.calls("POST", r"/pods/low-1/eviction$")) == 1


def test_a_preemption_complete_does_not_evict_its_terminating_victims_again(kube: FakeKube, api, clock):
    two_nodes(kube)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    assert sorted(sched.preempted) == [("default/low-1", "a"), ("default/low-2", "a")]
    assert "victims" not in reservations(kube, "a")["default/urgent"]
    kube.add(bound("low-2", "a", 4, 2))                            # as if still terminating
    sched.schedule_once()
    assert sched.preempted == [] and len(kube.calls("POST", r"/pods/low-2/eviction$")) == 1


def test_a_first_eviction_refused_gives_the_node_back(kube: FakeKube, api, clock):
    two_nodes(kube)
    kube.inject("POST", r"/pods/low-1/eviction$", 429)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    assert sched.schedule_once() == {"default/urgent": None}
    assert "preemption failed" in sched.reasons["default/urgent"] and reservations(kube, "a") == {}
    assert kube.get("pods", "low-2", "default") is not None        # no one evicted for it


def test_the_victims_left_are_read_as_last_written_while_the_node_cache_lags(kube: FakeKube, api, clock):
    """The node cache (watch) may still show the reservation as first written, with no victims left: the pass must
    read the victims left as this replica last wrote them, or it would wait for victims never evicted."""
    two_nodes(kube)
    kube.inject("POST", r"/pods/low-2/eviction$", 429)
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    sched.schedule_once()
    written = reservations(kube, "a")["default/urgent"]
    first = {k: v for k, v in written.items() if k != "victims"}           # as the cache still has it
    held = sched.holds.preemptor.held(clock.now, {"a": {"default/urgent": first}})
    assert held["a"]["default/urgent"] == written
    assert sched.holds.preemptor.held(clock.now, {"a": {"default/urgent": written}}) == {}   # caught up
