"""A preemption's own eviction of v got no answer and is still in flight at the API server (a 504 leaves it so).
Its next pass reads v running and asks no eviction of it (the emergency stop set meanwhile, or a 429), and the
eviction lands after that read. A later pass finds v terminating: that eviction, counted (`preempted`) with its Event
`Preempted`. The preemption forgot its doubt at the read that found v running, so v was taken for one terminating
already: never counted, no Event. A doubt is now kept until an eviction of the victim is sent again
(`Preemptor._overtaken`), as another preemption's already was (test_k8s_preemption_unanswered_inflight.py).
Against the fake API server."""

from __future__ import annotations

from fakeapi import FakeKube
from test_k8s_preemption import events, reservations
from test_k8s_preemption_unanswered import terminate
from test_k8s_preemption_unanswered_inflight import StopAfterRead, low_unanswered


class StopUntilLifted(StopAfterRead):
    """The emergency stop, set once v has been read (low's eviction landing then), until `lifted`."""

    lifted = False

    def __call__(self) -> str | None:
        return None if self.lifted else super().__call__()


def test_an_own_unanswered_eviction_landing_after_a_stopped_read_is_counted(kube: FakeKube, api, clock):
    stop = StopUntilLifted(kube, clock)
    sched = low_unanswered(kube, api, clock, emergency_stop=stop)
    kube.before("GET", r"/pods/v$", lambda: setattr(stop, "read", True))   # low's read, v running
    clock.advance(5)
    sched.schedule_once()
    assert stop.landed and kube.calls("POST", r"/pods/v/eviction$") == []   # asked none: the stop
    assert reservations(kube, "a")["default/low"]["victims"] == ["default/v"]
    stop.lifted = True
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/v", "a")]                     # low's read v terminating: its eviction
    assert events(kube, "v") == [("Preempted", "Preempted by default/low on node a")]


def test_an_own_unanswered_eviction_landing_after_a_refused_ask_is_counted(kube: FakeKube, api, clock):
    sched = low_unanswered(kube, api, clock)
    kube.before("POST", r"/pods/v/eviction$", lambda: terminate(kube, clock, "v"))   # the earlier one lands
    kube.inject("POST", r"/pods/v/eviction$", 429)                     # the one asked now refused
    clock.advance(5)
    sched.schedule_once()
    assert len(kube.calls("POST", r"/pods/v/eviction$")) == 1 and sched.preempted == []
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [("default/v", "a")]
    assert events(kube, "v") == [("Preempted", "Preempted by default/low on node a")]


def test_a_victim_read_running_past_the_evictions_flight_and_deleted_by_its_owner_is_not_counted(kube: FakeKube,
                                                                                                 api, clock):
    # kept for as long as the hold (an hour, renewed while refusals came), the doubt counted a victim its owner
    # deleted 40 minutes on (a rollout) as preempted, with a false Event (audit s36a20): read running IN_FLIGHT_S
    # after the eviction that got no answer, it was not evicted by it
    from balancer.actuate.k8s_preempt import IN_FLIGHT_S

    stop = StopUntilLifted(kube, clock)
    sched = low_unanswered(kube, api, clock, emergency_stop=stop)
    stop.read = stop.landed = True   # the stop holds from now on, and no eviction lands
    clock.advance(IN_FLIGHT_S + 5)
    sched.schedule_once()                                              # low's read: v running, past the flight
    assert kube.calls("POST", r"/pods/v/eviction$") == []
    terminate(kube, clock, "v")                                        # its owner deletes it
    stop.lifted = True
    clock.advance(5)
    sched.schedule_once()
    assert sched.preempted == [] and events(kube, "v") == []


def test_a_victim_the_pass_misses_but_a_read_finds_running_within_the_flight_stays_to_read_again(kube: FakeKube,
                                                                                                  api, clock):
    # kept in doubt inside IN_FLIGHT_S but dropped from the victims left, it was read again only at release, with no
    # window: its owner's deletion 40 minutes on was counted as preempted (audit s36a21)
    from balancer.actuate.k8s_preempt import Evictions

    sched = low_unanswered(kube, api, clock)
    preemptor, done = sched.holds.preemptor, Evictions()
    clock.advance(5)
    preemptor._judge("default/low", "a", "default/v", done)           # the pass's list lags: v read running
    assert done.left == ["default/v"] and done.evicted == []
    assert "default/v" in preemptor._unsure[("default/low", "a")]
