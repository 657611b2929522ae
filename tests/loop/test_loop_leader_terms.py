"""A replica that loses the lead and takes it again starts as a new leader would. It kept its planner state from
before: streaks counted minutes ago drove actions on the first reading after its return, and a hot taint the other
leader set in between was not taken as inherited (its readings were long past `hotReadings`), so it reopened a node
still warm."""

from __future__ import annotations

from scripted_fleet import COOL, HOT, WARM, Clock, M, N, ScriptedFleet, taint_changes

from balancer.loop import InMemoryLeaderElector, InMemoryLease, Reconciler

LEASE_S = 90.0


def cycles(fleet: ScriptedFleet, rec: Reconciler, temps: list[float]) -> list[str]:
    statuses = []
    for t in temps:
        fleet.clock.now += 30.0
        fleet.t0 = t
        statuses.append(rec.run_once().status)
    return statuses


def pair() -> tuple[ScriptedFleet, Reconciler, Reconciler]:
    fleet = ScriptedFleet(Clock())
    lease = InMemoryLease(duration_s=LEASE_S)
    return (fleet, fleet.replica("a", InMemoryLeaderElector(lease, "a")),
            fleet.replica("b", InMemoryLeaderElector(lease, "b")))


def away(fleet: ScriptedFleet) -> None:
    """The leader stops running cycles (stuck, partitioned, killed) for longer than its Lease."""
    fleet.clock.now += LEASE_S + 10.0


def test_streaks_counted_before_the_lead_was_lost_do_not_count_after_it_is_taken_again():
    fleet, a, b = pair()
    assert cycles(fleet, a, [HOT] * (N - 1)) == ["ok"] * (N - 1)   # one reading short of a hotspot
    assert not fleet.acted("a")
    away(fleet)
    assert cycles(fleet, b, [COOL] * 3) == ["ok"] * 3              # b leads, the GPU cools
    away(fleet)                                                     # b goes
    assert cycles(fleet, a, [HOT]) == ["ok"]                        # a leads again: one hot reading
    assert not fleet.acted("a")                                     # not a hotspot yet: N readings from now
    cycles(fleet, a, [HOT] * (N - 1))
    assert taint_changes(fleet.acted("a")) == [("n0", False)]


def test_a_taint_the_other_leader_set_meanwhile_is_inherited_and_kept_while_the_gpu_is_warm():
    fleet, a, b = pair()
    cycles(fleet, a, [COOL] * (2 * N))
    away(fleet)
    cycles(fleet, b, [HOT] * N + [WARM] * 2)                      # b taints n0 and keeps it in the warm band
    assert taint_changes(fleet.acted("b")) == [("n0", False)] and fleet.tainted
    away(fleet)
    assert cycles(fleet, a, [WARM] * (2 * N)) == ["ok"] * (2 * N)
    assert taint_changes(fleet.acted("a")) == [] and fleet.tainted   # warm: not reopened
    cycles(fleet, a, [COOL] * M)
    assert taint_changes(fleet.acted("a")) == [("n0", True)]       # cool for coolReadings: given back



def test_a_cycle_during_which_the_lead_changed_hands_and_came_back_applies_nothing_it_planned():
    """The plan was made in the term that ended: another leader may have acted since."""
    fleet, a, b = pair()
    cycles(fleet, a, [HOT] * (N - 1))
    read, reads = fleet.snapshot, []

    def slow_fresh_read():   # a's read before acting takes minutes: b leads meanwhile, then gives the Lease up
        reads.append(1)
        if len(reads) == 2:
            away(fleet)
            assert b.run_once().status == "ok"
            b.elector.release()
        return read()

    fleet.snapshot = slow_fresh_read
    fleet.clock.now += 30.0
    report = a.run_once()
    assert report.plan.actions and not fleet.acted("a")
    assert [why for _, why in report.rejected] == ["not_leader"] * len(report.plan.actions)
