"""A lower pod's eviction of v got no answer and is still in flight at the API server (a 504 leaves it so); a pod of
higher priority then reads v running and asks no eviction of it (a 429, or the emergency stop set meanwhile), and the
lower pod's eviction lands after that read. The lower pod's next read finds v terminating: its eviction, counted
(`preempted`) with its Event `Preempted`. Its doubt was forgotten at the higher pod's read (`Preemptor._ran`, 9abfdba0),
so v was taken for one terminating already: never counted, no Event. A doubt is handed over only when the other
pod's eviction is sent, answered or not (`Preemptor._overtaken`). Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube, node
from test_k8s_preemption import bound, events, most_free, pending, reservations
from test_k8s_preemption_unanswered import terminate, unanswered

from balancer.actuate.k8s_scheduler import SecondaryScheduler


def in_flight(kube: FakeKube, api, clock, **kwargs) -> SecondaryScheduler:
    """low's eviction of v on a unanswered, not landed yet (v runs on); urgent, of higher priority, pending."""
    sched = low_unanswered(kube, api, clock, **kwargs)
    kube.add(pending("urgent", 4, 50))                                 # placed first: it reads v running
    return sched


def low_unanswered(kube: FakeKube, api, clock, **kwargs) -> SecondaryScheduler:
    """low's eviction of v on a unanswered, not landed yet (v runs on); answered from then on."""
    kube.add(node("a", 4))
    kube.add(bound("v", "a", 4, 1))
    kube.add(pending("low", 4, 10))
    sched = SecondaryScheduler(api, "gputide", most_free, clock=clock, sleep=lambda s: None, **kwargs)
    tries = unanswered(sched, "v", lambda: None)
    sched.schedule_once()
    assert len(tries) == 4 and sched.preempted == []
    assert reservations(kube, "a")["default/low"]["victims"] == ["default/v"]
    del sched.api.core.create_namespaced_pod_eviction                  # answered from now on
    return sched


def test_a_lower_pods_eviction_landing_after_a_refused_higher_pod_read_the_victim_is_counted(kube: FakeKube, api,
                                                                                             clock):
    sched = in_flight(kube, api, clock)
    kube.before("POST", r"/pods/v/eviction$", lambda: terminate(kube, clock, "v"))   # low's lands meanwhile
    kube.inject("POST", r"/pods/v/eviction$", 429)                     # urgent's refused
    clock.advance(5)
    sched.schedule_once()
    assert "preemption failed" in sched.reasons["default/urgent"]
    assert sched.preempted == [("default/v", "a")]                     # low's eviction landed
    assert events(kube, "v") == [("Preempted", "Preempted by default/low on node a")]


class StopAfterRead:
    """The emergency stop, set once urgent has read v (`kube.before` on that read sets `read`); low's eviction lands
    as the stop is first told."""

    def __init__(self, kube: FakeKube, clock) -> None:
        self.kube, self.clock, self.read, self.landed = kube, clock, False, False

    def __call__(self) -> str | None:
        if not self.read:
            return None
        if not self.landed:
            self.landed = True
            terminate(self.kube, self.clock, "v")
        return "emergency stop file exists"


def test_a_lower_pods_eviction_landing_after_a_stopped_higher_pod_read_the_victim_is_counted(kube: FakeKube, api,
                                                                                             clock):
    stop = StopAfterRead(kube, clock)
    sched = in_flight(kube, api, clock, emergency_stop=stop)
    kube.before("GET", r"/pods/v$", lambda: setattr(stop, "read", True))   # urgent's read
    clock.advance(5)
    sched.schedule_once()
    assert stop.landed and kube.calls("POST", r"/pods/v/eviction$") == []   # urgent asked none
    assert sched.preempted == [("default/v", "a")]                     # low's read v terminating: its eviction
    assert events(kube, "v") == [("Preempted", "Preempted by default/low on node a")]


def test_a_higher_pods_unanswered_eviction_takes_the_doubt_over_and_the_victim_is_counted_once(kube: FakeKube, api,
                                                                                               clock):
    sched = in_flight(kube, api, clock)
    tries = unanswered(sched, "v", lambda: terminate(kube, clock, "v"))   # urgent's lands, unanswered
    clock.advance(5)
    sched.schedule_once()
    assert len(tries) == 4 and list(reservations(kube, "a")) == ["default/urgent"]   # low's hold given back
    assert sched.preempted == []                                       # low's release read v: not its eviction
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/v", "a")]                     # urgent's read: its own, once
    assert events(kube, "v") == [("Preempted", "Preempted by default/urgent on node a")]
