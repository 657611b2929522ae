"""Readings in a row are readings with no hold between them: a hot (or cool) streak counted before the controller
held still (fail-static) does not carry over to the first fresh reading after it. Across the hold the GPU was not
seen: one hot reading after half an hour blind is one hot reading, not the `hotReadings`-th."""

from __future__ import annotations

from balancer.errors import StaleTelemetry
from balancer.loop import NullLeaderElector
from tests.loop.scripted_fleet import COOL, HOT, Clock, M, N, ScriptedFleet, taint_changes


class Blinking(ScriptedFleet):
    """The scripted fleet, whose telemetry goes stale while `down`."""

    down = False

    def snapshot(self):
        if self.down:
            raise StaleTelemetry("exporter hung")
        return super().snapshot()


def _run(fleet: Blinking, rec, clock: Clock, readings: int) -> list[str]:
    statuses = []
    for _ in range(readings):
        clock.now += 30
        statuses.append(rec.run_once().status)
    return statuses


def test_a_hot_streak_does_not_span_a_hold():
    clock = Clock()
    fleet = Blinking(clock)
    rec = fleet.replica("a", NullLeaderElector())
    fleet.t0 = HOT
    assert _run(fleet, rec, clock, N - 1) == ["ok"] * (N - 1) and fleet.acted("a") == []
    fleet.down = True
    assert set(_run(fleet, rec, clock, 60)) == {"fail_static"}   # half an hour blind
    fleet.down = False
    _run(fleet, rec, clock, N - 1)
    assert fleet.acted("a") == [], "a hotspot from readings half an hour apart"
    _run(fleet, rec, clock, 1)   # N fresh hot readings in a row: it acts
    assert ("n0", False) in taint_changes(fleet.acted("a"))


def test_a_cool_streak_does_not_span_a_hold():
    clock = Clock()
    fleet = Blinking(clock)
    rec = fleet.replica("a", NullLeaderElector())
    fleet.t0 = HOT
    _run(fleet, rec, clock, N)
    assert taint_changes(fleet.acted("a")) == [("n0", False)]
    fleet.t0 = COOL
    _run(fleet, rec, clock, M - 1)
    fleet.down = True
    _run(fleet, rec, clock, 60)
    fleet.down = False
    _run(fleet, rec, clock, M - 1)
    assert taint_changes(fleet.acted("a")) == [("n0", False)], "released on cool readings half an hour apart"
    _run(fleet, rec, clock, 1)
    assert taint_changes(fleet.acted("a"))[-1] == ("n0", True)


def test_a_services_slack_streak_does_not_span_a_hold():
    """The streak of slack readings that gives a shrunk job's workers back starts again after a hold."""
    from dataclasses import replace
    from types import MappingProxyType

    clock = Clock()
    fleet = Blinking(clock)
    rec = fleet.replica("a", NullLeaderElector())
    _run(fleet, rec, clock, 1)
    rec.state = replace(rec.state, colocation=replace(rec.state.colocation, slack_streak=MappingProxyType({"svc": 4})))
    fleet.down = True
    _run(fleet, rec, clock, 1)
    assert dict(rec.state.colocation.slack_streak) == {}
