"""Releasing a hold whose preemption doubts two victims (each eviction got no answer, and each landed) reads them
one by one (`Preemptor.release`) while this replica still leads: a Lease lost after the first read (here during
that victim's Event `Preempted`) stops the reads there. The second victim is neither read nor counted
(`preempted`, gputide_scheduler_preempted_pods_total), and gets no Event: a replica no longer leading reads nothing
and says nothing, as where its next term forgets the doubt. Only a Lease lost before the release's first read was
tested (test_k8s_preemption_unanswered_release.py); the halt is asked before each read, so losing it between two
reads must stop the second. Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_unanswered import unanswered

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def two_doubted(kube: FakeKube, api, clock, **kwargs) -> SecondaryScheduler:
    """urgent preempts p1, then p2, on a: each eviction carried out (the pod deleted) but unanswered, so both are
    doubted, p1 first. p1's eviction stops the first pass; the second evicts p2 and cannot read p1 (a 403 then),
    which keeps p1's doubt: the hold of urgent doubts both."""
    kube.add(node("a", 8))
    kube.add(bound("p1", "a", 4, 2))                                   # the more important: evicted first
    kube.add(bound("p2", "a", 4, 1))
    kube.add(pending("urgent", 8, 50))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None, **kwargs)
    unanswered(sched, "p1", lambda: kube.delete("pods", "p1", "default"))
    unanswered(sched, "p2", lambda: kube.delete("pods", "p2", "default"))
    assert sched.schedule_once() == {"default/urgent": None}
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/p1", "default/p2"]
    kube.inject("GET", r"/pods/p1$", 403)                              # p1 unread at the second pass: still doubted
    clock.advance(5)
    assert sched.schedule_once() == {"default/urgent": None}
    assert sched.preempted == [] and set(reservations(kube, "a")) == {"default/urgent"}
    assert set(sched.holds.preemptor._unsure[("default/urgent", "a")]) == {"default/p1", "default/p2"}
    return sched


def released(kube: FakeKube, sched: SecondaryScheduler, clock) -> int:
    """urgent deleted: the next pass (another pod's, fitting nowhere) gives a back and releases urgent's hold. The
    index of the requests of that pass."""
    kube.delete("pods", "urgent", "default")
    kube.add(pending("other", 16, 5))
    since = len(kube.requests)
    clock.advance(5)
    sched.schedule_once()
    return since


def reads(kube: FakeKube, since: int) -> list[str]:
    """The pods p1 and p2 read from request `since` on, in order."""
    return [name for r in kube.requests[since:] if r.method == "GET"
            and (name := r.path.split("?")[0].rsplit("/", 1)[-1]) in ("p1", "p2")]


def test_a_release_still_leading_reads_and_counts_both_doubted_victims(kube: FakeKube, api, clock):
    sched = two_doubted(kube, api, clock)
    since = released(kube, sched, clock)
    assert reads(kube, since) == ["p1", "p2"]
    assert sched.preempted == [("default/p1", "a"), ("default/p2", "a")]
    assert events(kube, "p2") == [("Preempted", "Preempted by default/urgent on node a")]


def test_the_lease_lost_between_two_reads_of_a_release_leaves_the_second_unread_and_uncounted(kube: FakeKube, api,
                                                                                               clock):
    lease = {"held": True}
    sched = two_doubted(kube, api, clock, leading=lambda: lease["held"])
    kube.before("POST", r"/events$", lambda: lease.update(held=False))   # p1 read (gone): lost as it is said
    since = released(kube, sched, clock)
    assert reads(kube, since) == ["p1"]                                # p2 not read
    assert reservations(kube, "a") == {}                               # given back before the reads
    assert sched.preempted == [("default/p1", "a")]                    # read while leading: counted
    assert events(kube, "p1") == [("Preempted", "Preempted by default/urgent on node a")]
    assert events(kube, "p2") == []
    assert sched.holds.preemptor._unsure == {}                         # p2's doubt dropped unread
