"""A replica that leads again reads what it knew from its earlier term afresh from the cluster: the reservations
(what is left of a preemption lives there, and a leader meanwhile may have changed it). It kept those it had
written in its earlier term, read over the cluster's for as long as they lasted: it evicted victims its earlier term
had listed, that the leader meanwhile had dealt with (here a StatefulSet's pod of the same name, recreated since).
A new term is one after the Lease was seen lost, or after the elector took it again between two passes."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import bound, most_free, reservations
from test_k8s_preemption_lease import one_node

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def leader_meanwhile(kube: FakeKube, api, clock) -> SecondaryScheduler:
    """Replica a preempts for urgent, low-2's eviction is refused (the victims left noted); then another replica
    leads and evicts low-2; low-2 is recreated there (a StatefulSet's pod keeps its name). Returns a."""
    one_node(kube)
    kube.inject("POST", r"/pods/low-2/eviction$", 429)
    a = SecondaryScheduler(api, "gputide", most_free, clock=clock)
    a.schedule_once()
    assert reservations(kube, "a")["default/urgent"]["victims"] == ["default/low-2"]
    clock.advance(5)
    SecondaryScheduler(api, "gputide", most_free, clock=clock).schedule_once()   # the other leader's term
    assert kube.get("pods", "low-2", "default") is None and "victims" not in reservations(kube, "a")["default/urgent"]
    kube.add(bound("low-2", "a", 4, 2))                               # recreated: no one's victim
    kube.add(bound("other", "a", 4, 60))                              # and urgent no longer fits there
    clock.advance(5)
    return a


def test_a_replica_leading_again_reads_the_reservations_afresh(kube: FakeKube, api, clock):
    lease = {"held": True}
    a = leader_meanwhile(kube, api, clock)
    a.leading = lambda: lease["held"]
    lease["held"] = False
    assert a.schedule_once() == {}                                     # a standby: its pass stops at once
    lease["held"] = True
    a.schedule_once()
    assert kube.get("pods", "low-2", "default") is not None            # not evicted again on its old list
    assert len(kube.calls("POST", r"/pods/low-2/eviction$")) == 2


def test_a_lease_lost_and_taken_back_between_two_passes_begins_a_new_term(kube: FakeKube, api, clock):
    a = leader_meanwhile(kube, api, clock)
    a.term = lambda: 2                                                 # its renewer lost the Lease and took it back
    a.schedule_once()
    assert kube.get("pods", "low-2", "default") is not None
    assert len(kube.calls("POST", r"/pods/low-2/eviction$")) == 2
