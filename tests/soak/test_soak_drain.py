"""After its last cycle the soak polls until every fault's fired alert is seen resolved (`AlertTracker.drain`): it
stops as soon as they are, gives up at its timeout, waits for no alert that never fired or whose fault has not
ended, and its polls are not counted in the summary's `alerts_seen`, which counts cycles."""

from __future__ import annotations

from balancer.app.soak_faults import AlertTracker, FaultRecord

NODE = "a100-13"
FIRING = {"state": "firing", "labels": {"alertname": "GpuTemperatureHigh", "hostname": NODE}}


class FakeSoak:
    """Prometheus as the tracker reads it: each /api/v1/alerts answers the next of `firing`, the last one repeats;
    a fake clock that a sleep moves on."""

    def __init__(self, *firing: list[dict]) -> None:
        self.prom, self.firing, self.now, self.polls = self, list(firing), 0.0, 0

    def alerts(self) -> list[dict]:
        self.polls += 1
        return self.firing.pop(0) if len(self.firing) > 1 else self.firing[0]

    def query(self, promql: str) -> list[dict]:
        return []

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def fired(begin: int, end: int | None = None, resolved: int | None = None) -> FaultRecord:
    return FaultRecord("cooling_failure", begin, ("GpuTemperatureHigh",), {"hostname": frozenset({NODE})},
                       end_cycle=end, fired_cycle=begin + 1, resolved_cycle=resolved)


def tracker(soak: FakeSoak, *records: FaultRecord) -> AlertTracker:
    t = AlertTracker(clock=lambda: soak.now)
    t.sleep = soak.sleep
    t.records += records
    return t


def test_the_drain_stops_as_soon_as_every_fired_alert_resolved():
    soak = FakeSoak([FIRING], [FIRING], [])
    rec = fired(70, end=74)
    tracker(soak, rec).drain(soak, 76)
    assert rec.resolved_cycle == 76 and rec.ok
    assert soak.polls == 3 and soak.now == 3.0


def test_the_drain_gives_up_at_its_timeout():
    soak = FakeSoak([FIRING])
    rec = fired(70, end=74)
    tracker(soak, rec).drain(soak, 76, timeout_s=20.0)
    assert rec.resolved_cycle is None and not rec.ok
    assert 20.0 <= soak.now <= 21.0


def test_the_drain_waits_for_no_alert_that_never_fired_is_resolved_or_whose_fault_has_not_ended():
    soak = FakeSoak([FIRING])
    never = FaultRecord("node_lost", 60, ("GpuXidErrorFatal",), end_cycle=63)
    tracker(soak, never, fired(70, end=74, resolved=75), fired(74)).drain(soak, 76)
    assert soak.polls == 0 and soak.now == 0.0


def test_the_drains_polls_are_not_counted_as_alerts_seen():
    soak = FakeSoak([FIRING], [FIRING], [FIRING], [])
    rec = fired(70)
    t = tracker(soak, rec)
    t.update(soak, 75)
    rec.end_cycle = 75
    t.update(soak, 76)
    assert t.seen == {"GpuTemperatureHigh": 2}   # the two cycles it fired in
    t.drain(soak, 76)
    assert rec.resolved_cycle == 76 and soak.polls == 4
    assert t.seen == {"GpuTemperatureHigh": 2}
