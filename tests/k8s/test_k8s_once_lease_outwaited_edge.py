"""The edge of `outwaited()`'s verdict (review of session 40): a wait behind another identity's Lease longer than it
waits (`_most`: here 40 s of a 120 s Lease) is said outwaited only if it watched the Lease unchanged for all of that
bound. `await_lease` reaches the verdict as the wait ends, and `outwaited()` returns it (it used to judge it again
from the elector's state). A wait whose clock stood still short of the bound (its tries ran out first) is no such
verdict; one that watched exactly the bound is. The pauses advance the test's clock, stopping at a set point (no real
waiting)."""

from __future__ import annotations

import pytest
from test_k8s_once_lease_expired import ME, taken_by_me
from test_k8s_once_lease_long import long_dead_lease

from balancer.actuate.k8s_leader import LeaseLeaderElector

NAME = "gputide-controller"


def pauses_until(clock, stop_at: float):
    """Pauses that advance the clock as asked, but never past `stop_at`: from there it stands still."""
    def pause(seconds: float) -> None:
        clock.advance(max(0.0, min(seconds, stop_at - clock.now)))
    return pause


@pytest.mark.parametrize(("watched", "verdict"), [(40.0, ("crashed-replica", 120, 40)), (37.5, None)])
def test_a_wait_is_outwaited_only_once_it_watched_the_whole_bound(kube, api, clock, watched, verdict):
    kube.add(long_dead_lease(NAME, 120))
    elector = LeaseLeaderElector(api, NAME, "gputide", ME, clock=clock)   # its own 15 s: the wait is 40 s of 120 s
    start = clock.now
    assert elector.try_acquire_or_renew() is False   # seen now: the wait's watch counts from here
    assert elector.await_lease(pause=pauses_until(clock, start + watched)) is False
    assert clock.now - start == watched, "the tries ran out with the clock stood at the point set"
    assert elector.outwaited() == verdict   # exactly the bound watched: said outwaited; short of it: not
    assert not taken_by_me(kube, NAME)
