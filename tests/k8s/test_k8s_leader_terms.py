"""`gputide run --leader-elect` renews its Lease from a thread (`start()`, ticked here by hand on the fake clock), and
the loop reads that thread's flag. A replica whose renewals fail while its loop is stuck, whose Lease another replica
takes and gives up, and whose renewer then takes it back, finds the flag True at its next cycle as it was at its last:
without the elector's count of terms it went on with the planner state from before, its streaks minutes old. It now
starts the new term as a new leader would."""

from __future__ import annotations

from balancer.actuate.k8s_leader import LeaseLeaderElector
from tests.k8s.test_k8s_leader_split_brain import Unreachable, controller_elector
from tests.loop.scripted_fleet import HOT, N, ScriptedFleet, taint_changes


def tick(clock, *electors: LeaseLeaderElector, seconds: float = 15.0) -> None:
    """The renewer threads' period passes."""
    clock.advance(seconds)
    for e in electors:
        e.renew()


def test_a_lease_lost_and_taken_back_between_two_cycles_starts_a_new_term(kube, api, clock, monkeypatch):
    fleet = ScriptedFleet(clock)
    a_lease, b_lease = (controller_elector(api, clock, monkeypatch, who) for who in "ab")
    a_lease.start(thread=False)
    b_lease.start(thread=False)
    a = fleet.replica("a", a_lease)
    fleet.t0 = HOT
    for _ in range(N - 1):   # one hot reading short of a hotspot
        tick(clock, a_lease, b_lease)
        tick(clock, a_lease, b_lease)
        assert a.run_once().status == "ok"
    assert not fleet.acted("a")
    reachable, a_lease.api.coordination = a_lease.api.coordination, Unreachable()
    while not b_lease.is_leader:   # a's loop is stuck and its renewals fail: b takes the Lease over ...
        tick(clock, a_lease, b_lease)
    b_lease.release()              # ... and gives it up (a rollout)
    a_lease.api.coordination = reachable
    tick(clock, a_lease)
    assert a_lease.is_leader and kube.get("leases", "gputide-controller", "gputide")["spec"]["leaseTransitions"] == 2
    assert a.run_once().status == "ok"
    assert not fleet.acted("a")    # one hot reading in this term: no hotspot yet
    assert a_lease.terms == 2
    for _ in range(N - 1):
        tick(clock, a_lease, seconds=30.0)
        a.run_once()
    assert taint_changes(fleet.acted("a")) == [("n0", False)]
