"""A wall clock stepped back (NTP) must not stretch a holder's term (audit a5, lease_clockstep.py).

Holder a's Lease calls fail and its wall clock is stepped back 60 s while its monotonic clock runs on. Before the
fix the renew deadline was measured on the wall clock: a still said `is_leader` 20 s later, while b, on its own
clock, had taken the Lease over (two leaders for about a minute). Now the wall clock only dates renewTime and
acquireTime: a stops leading at the renew deadline, before b may take over, whatever its wall clock does.
"""

from __future__ import annotations

import pytest
from fakeapi import FakeKube

from balancer.actuate.k8s_leader import LeaseLeaderElector
from balancer.actuate.kubernetes import parse_time


class Clock:
    def __init__(self, t: float) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class Unreachable:
    """The API server as a replica sees it through a broken network path: every Lease call times out."""

    def __getattr__(self, name):
        def call(*args, **kwargs):
            raise OSError(f"{name}: timed out")
        return call


def elector(api, identity: str, wall: Clock, mono: Clock) -> LeaseLeaderElector:
    return LeaseLeaderElector(api, "gputide-controller", "gputide", identity, lease_duration_s=15,
                              renew_deadline_s=10, clock=wall, monotonic=mono)


@pytest.mark.parametrize("step_s", [-60.0, +60.0])
def test_a_wall_clock_step_never_gives_two_leaders(step_s):
    with FakeKube() as kube:
        api = kube.client()
        wall_a, wall_b = Clock(1_700_000_000.0), Clock(1_700_000_000.0)
        mono_a, mono_b = Clock(500.0), Clock(9_000.0)   # monotonic clocks share no origin
        a, b = elector(api, "a", wall_a, mono_a), elector(api, "b", wall_b, mono_b)
        assert a.try_acquire_or_renew() and not b.try_acquire_or_renew()
        a.api.coordination.api_client = Unreachable()   # a's path to the API server breaks
        a_led_until = b_leads_from = None
        for step in range(1, 13):   # 2.5 s ticks of both renewers, 30 s in all
            for c in (wall_a, wall_b, mono_a, mono_b):
                c.t += 2.5
            if step == 2:
                wall_a.t += step_s   # a's wall clock is stepped (NTP); its monotonic clock is not
            a.renew()
            b.renew()
            assert not (a.is_leader and b.is_leader), f"two leaders at t+{step * 2.5} s"
            if a.is_leader:
                a_led_until = step * 2.5
            if b.is_leader and b_leads_from is None:
                b_leads_from = step * 2.5
        assert a_led_until == 7.5   # under the 10 s renew deadline after its last write, as without a step
        assert b_leads_from == 15.0   # a lease duration after b saw the record change


def test_the_lease_is_dated_on_the_wall_clock_and_timed_on_the_monotonic_one():
    with FakeKube() as kube:
        api = kube.client()
        wall, mono = Clock(1_700_000_000.0), Clock(42.0)
        a = elector(api, "a", wall, mono)
        assert a.try_acquire_or_renew()
        spec = kube.get("leases", "gputide-controller", "gputide")["spec"]
        assert parse_time(spec["renewTime"]) == pytest.approx(1_700_000_000.0, abs=1e-3)
        assert parse_time(spec["acquireTime"]) == pytest.approx(1_700_000_000.0, abs=1e-3)
        wall.t -= 3600   # a wall clock stepped back an hour does not end (or stretch) the term
        mono.t += 9.9
        assert a.is_leader
        mono.t += 0.1
        assert not a.is_leader
