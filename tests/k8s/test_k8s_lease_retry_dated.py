"""A write of the Lease again after a 409 for a metadata edit (`LeaseLeaderElector._take`, audit a9 of session 40)
carried the renewTime (and a takeover's acquireTime) of the try's start, though sent later: a successor's hand-over
(balancer/cmd/hand_over_floors.py: renewTime + leaseDurationSeconds) then said the Lease held for less than it is,
short by the time the first write and the read again took. It is now dated when it is sent; a renewal's acquireTime
stays the term's. The 409's call advances the test's clock (a slow call)."""

from __future__ import annotations

import pytest

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.actuate.kubernetes import parse_time

NAME, ME = "gputide-controller", "replica-a"
PUT = rf"/leases/{NAME}$"


def slow_409_on_the_next_write(kube, clock, seconds: float) -> None:
    """An annotation edited just before our next write lands (a 409), that call taking `seconds`."""
    def edited() -> None:
        kube.mutate("leases", NAME, "gputide", {"metadata": {"annotations": {"example.com/note": "edited"}}})
        clock.advance(seconds)

    kube.before("PUT", PUT, edited)


def times(kube) -> tuple[float, float]:
    """The Lease's (renewTime, acquireTime) as stored."""
    spec = kube.get("leases", NAME, "gputide")["spec"]
    return parse_time(spec["renewTime"]), parse_time(spec["acquireTime"])


def test_a_released_lease_taken_with_a_write_again_is_dated_then(kube, api, clock) -> None:
    holder = LeaseLeaderElector(api, NAME, "gputide", "replica-b", clock=clock)
    holder.start(thread=False)
    assert holder.release() is True   # holder "": the next try takes it at once
    clock.advance(1)
    elector, began = LeaseLeaderElector(api, NAME, "gputide", ME, clock=clock), clock.now
    slow_409_on_the_next_write(kube, clock, 4)
    assert elector.try_acquire_or_renew() is True and elector.is_leader
    renewed, acquired = times(kube)
    assert renewed == pytest.approx(began + 4, abs=1e-3)   # was: began, 4 s before it was sent
    assert acquired == pytest.approx(began + 4, abs=1e-3), "a takeover's acquireTime, the write that won"


def test_a_renewal_written_again_is_dated_then_and_keeps_its_terms_acquire_time(kube, api, clock) -> None:
    elector = LeaseLeaderElector(api, NAME, "gputide", ME, clock=clock)
    took = clock.now
    elector.start(thread=False)
    assert elector.is_leader and times(kube)[1] == pytest.approx(took, abs=1e-3)
    clock.advance(elector.retry_period_s)
    began = clock.now
    slow_409_on_the_next_write(kube, clock, 3)
    assert elector.renew() is True and elector.terms == 1
    renewed, acquired = times(kube)
    assert renewed == pytest.approx(began + 3, abs=1e-3)   # was: began
    assert acquired == pytest.approx(took, abs=1e-3), "a renewal keeps the term's acquireTime"
