"""LeaseLeaderElector's renewer (`start()`, ticked by hand here with `thread=False`) and what it means for the loop's
check before every action: a look at a flag, never an API call; a Lease someone else wrote is not ours; a released
Lease is never taken back by the renewer."""

from __future__ import annotations

import pytest
from fakeapi import FakeKube

from balancer.actuate.k8s_leader import LeaseLeaderElector


def elector(api, clock, identity: str, **kw) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, "gputide-controller", "gputide", identity, lease_duration_s=15,
                              renew_deadline_s=10, clock=clock, **kw)


def lease_requests(kube: FakeKube) -> int:
    return sum("/leases" in r.path for r in kube.requests)


def test_with_a_renewer_the_loops_check_before_an_action_makes_no_api_call(kube: FakeKube, api, clock) -> None:
    a = elector(api, clock, "replica-a")
    a.start(thread=False)
    before = lease_requests(kube)
    assert all(a.try_acquire(clock.now) for _ in range(20))
    assert lease_requests(kube) == before
    clock.advance(10)   # no renewal for the whole renew deadline: the flag drops by itself
    assert a.try_acquire(clock.now) is False and lease_requests(kube) == before
    assert a.renew() is True and a.try_acquire(clock.now) is True


def test_without_a_renewer_the_loop_renews_each_time_it_asks(kube: FakeKube, api, clock) -> None:
    a = elector(api, clock, "replica-a")
    assert a.try_acquire(clock.now) is True
    before = lease_requests(kube)
    clock.advance(9)
    assert a.try_acquire(clock.now) is True
    assert lease_requests(kube) == before + 2   # read and write: renewed
    clock.advance(9)
    assert a.is_leader is True   # 18 s after it first took the Lease, 9 s after the renewal the check made


def test_a_lease_written_by_someone_else_since_it_was_read_is_not_ours_until_a_renewal_succeeds(kube: FakeKube, api,
                                                                                              clock) -> None:
    a = elector(api, clock, "replica-a")
    a.try_acquire_or_renew()
    kube.before("PUT", r"/leases/gputide-controller$", lambda: kube.mutate(   # its holder record: renewTime
        "leases", "gputide-controller", "gputide", {"spec": {"renewTime": "2020-01-01T00:00:00.000000Z"}}))
    assert a.try_acquire_or_renew() is False and a.is_leader is False   # 409: it stops acting at once
    assert a.try_acquire_or_renew() is True and a.is_leader is True     # read again: still its own


def test_release_stops_the_renewer_so_it_cannot_take_the_lease_back(kube: FakeKube, api, clock) -> None:
    a = elector(api, clock, "replica-a")
    a.start(thread=False)
    assert a.release() is True
    before = lease_requests(kube)
    clock.advance(1)
    assert a.renew() is False and a.is_leader is False
    assert lease_requests(kube) == before
    assert kube.get("leases", "gputide-controller", "gputide")["spec"]["holderIdentity"] == ""


def test_a_renewer_that_raises_unexpectedly_keeps_going(kube: FakeKube, api, clock, monkeypatch) -> None:
    a = elector(api, clock, "replica-a")
    a.start(thread=False)

    def broken():
        raise KeyError("resourceVersion")

    monkeypatch.setattr(a, "try_acquire_or_renew", broken)
    clock.advance(2.5)
    assert a.renew() is False and a.is_leader is True   # not renewed, still inside the renew deadline
    monkeypatch.undo()
    assert a.renew() is True


@pytest.mark.parametrize("period", [0.0, 10.0, -1.0])
def test_the_retry_period_must_fall_inside_the_renew_deadline(api, clock, period) -> None:
    with pytest.raises(ValueError, match="retry_period_s"):
        elector(api, clock, "replica-a", retry_period_s=period)


def test_the_controllers_lease_is_renewed_four_times_within_its_renew_deadline(api) -> None:
    from balancer.cmd.run import lease_elector

    e = lease_elector(api, "gputide-controller", "gputide", 30.0)
    assert (e.lease_duration_s, e.renew_deadline_s, e.retry_period_s) == (90, 60.0, 15.0)
