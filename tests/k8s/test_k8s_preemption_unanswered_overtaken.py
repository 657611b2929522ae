"""A victim whose eviction for one pod got no answer and did not land (it runs on) is preempted next by a pod of
higher priority, whose eviction of it is answered: the lower pod's hold there is given back (`lower_holds`), and its
release reads the victim it doubted, finding it terminating. That is the higher pod's eviction, counted once by it:
it was counted again for the lower pod (`on_landed`), `preempted` naming the victim twice, and the victim got a
second Event `Preempted` naming the lower pod, which evicted nothing. A doubt is handed over only when another
preemption sends its eviction of the victim, answered or not (`Preemptor._overtaken`); a read finding the victim
running keeps every doubt, for an earlier eviction may still land (test_k8s_preemption_unanswered_inflight.py,
test_k8s_preemption_unanswered_own_inflight.py). Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_unanswered import unanswered

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def test_a_victim_evicted_by_a_higher_pod_after_a_lower_ones_unanswered_eviction_is_counted_once(
        kube: FakeKube, api, clock):
    kube.add(node("a", 4))
    kube.add(bound("v", "a", 4, 1))
    kube.add(pending("low", 4, 10))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None)
    tries = unanswered(sched, "v", lambda: None)                       # not landed: v runs on
    sched.schedule_once()
    assert len(tries) == 4 and sched.preempted == []
    assert reservations(kube, "a")["default/low"]["victims"] == ["default/v"]   # left: judged at the next pass
    del sched.api.core.create_namespaced_pod_eviction                  # answered from now on
    kube.add(pending("urgent", 4, 50))                                 # placed first: it preempts v on a
    clock.advance(5)
    sched.schedule_once()
    assert list(reservations(kube, "a")) == ["default/urgent"]         # low's hold given back
    assert sched.preempted == [("default/v", "a")]                     # urgent's eviction, once
    assert events(kube, "v") == [("Preempted", "Preempted by default/urgent on node a")]
