"""Whatever goes wrong while reading telemetry, the cycle holds still (fail-static) with a reason, and the staleness
gauge tells this cycle's reading, never the last good one's."""

from __future__ import annotations

import logging
import math

from test_loop_reconciler import Recording, cycles, hot_sim, loop_for

from balancer.actuate.sim import SimActuator
from balancer.errors import StaleTelemetry
from balancer.telemetry.sim import SimTelemetrySource


class Broken(SimTelemetrySource):
    """A source whose read raises something that is not a TelemetryError (a bug, an answer no check foresaw)."""

    broken: bool = False

    def snapshot(self):
        if self.broken:
            raise KeyError("data")
        return super().snapshot()


class BreaksBeforeActing(SimTelemetrySource):
    """Good on the planning read, raising on the fresh read before acting (a second read at the same sim time)."""

    last_read: float = -1.0
    fresh_reads: int = 0

    def snapshot(self):
        again, self.last_read = self.sim.time == self.last_read, self.sim.time
        if again:
            self.fresh_reads += 1
            raise AttributeError("'NoneType' object has no attribute 'get'")
        return super().snapshot()


def test_an_unexpected_exception_while_reading_telemetry_holds_still_with_a_reason_and_its_traceback(caplog):
    sim = hot_sim()
    source = Broken(sim)
    actuator = Recording(SimActuator(sim))
    rec, reg = loop_for(sim, source, actuator)
    cycles(sim, rec, 2)
    source.broken = True
    before = len(actuator.calls)
    with caplog.at_level(logging.WARNING, logger="balancer.loop"):
        reports = cycles(sim, rec, 3)
    assert [(r.status, r.reason) for r in reports] == [("fail_static", "telemetry_error")] * 3
    assert len(actuator.calls) == before
    assert reg.get_sample_value("gputide_fail_static") == 1
    assert reg.get_sample_value("gputide_fail_static_info", {"reason": "telemetry_error"}) == 1
    assert reg.get_sample_value("gputide_reconcile_total", {"result": "error"}) == 0
    held = [r for r in caplog.records if "fail-static (telemetry_error)" in r.getMessage()]
    assert len(held) == 3 and held[0].exc_info is not None and "KeyError" in held[0].getMessage()
    source.broken = False
    assert cycles(sim, rec, 1)[0].status == "ok"
    assert reg.get_sample_value("gputide_fail_static_info", {"reason": "telemetry_error"}) == 0


def test_an_unexpected_exception_on_the_fresh_read_before_acting_holds_still_and_nothing_is_applied():
    sim = hot_sim()
    actuator = Recording(SimActuator(sim))
    source = BreaksBeforeActing(sim)
    rec, reg = loop_for(sim, source, actuator)
    reports = cycles(sim, rec, 10)
    assert source.fresh_reads >= 1   # the planner did propose actions
    assert sum(r.status == "fail_static" and r.reason == "telemetry_error" for r in reports) == source.fresh_reads
    assert all(r.status in ("ok", "fail_static") for r in reports)
    assert actuator.calls == []
    assert reg.get_sample_value("gputide_fail_static_info", {"reason": "telemetry_error"}) == (
        reports[-1].status == "fail_static")


def test_the_staleness_gauge_reports_this_cycles_reading_during_a_hold_not_the_last_good_one():
    sim = hot_sim()
    source = SimTelemetrySource(sim, sample_age_s=5.0)
    rec, reg = loop_for(sim, source)
    cycles(sim, rec, 1)
    assert reg.get_sample_value("gputide_telemetry_staleness_seconds") == 5.0
    source.sample_age_s = 900.0   # stale: read, refused by the loop's own check
    assert cycles(sim, rec, 1)[0].reason == "stale_telemetry"
    assert reg.get_sample_value("gputide_telemetry_staleness_seconds") == 900.0
    source.sample_age_s, source.down = 5.0, True   # nothing read: the age is unknown, not the last one seen
    assert cycles(sim, rec, 1)[0].reason == "telemetry_unavailable"
    assert math.isnan(reg.get_sample_value("gputide_telemetry_staleness_seconds"))
    source.down = False
    assert cycles(sim, rec, 1)[0].status == "ok"
    assert reg.get_sample_value("gputide_telemetry_staleness_seconds") == 5.0


def test_the_staleness_gauge_takes_the_age_a_refusing_source_measured():
    sim = hot_sim()

    class Measured(SimTelemetrySource):
        oldest_sample_age_s = math.nan

        def snapshot(self):
            self.oldest_sample_age_s = 480.0   # as PrometheusTelemetrySource keeps it before refusing a reading
            raise StaleTelemetry("3 GPU(s) have samples older than 60s")

    rec, reg = loop_for(sim, Measured(sim))
    assert cycles(sim, rec, 1)[0].reason == "stale_telemetry"
    assert reg.get_sample_value("gputide_telemetry_staleness_seconds") == 480.0


def test_gpus_of_unknown_health_are_counted_on_a_reading_acted_on_and_unknown_during_a_hold():
    sim = hot_sim()
    source = SimTelemetrySource(sim)
    rec, reg = loop_for(sim, source)
    cycles(sim, rec, 1)
    assert reg.get_sample_value("gputide_gpus_health_unknown") == 0
    source.down = True
    cycles(sim, rec, 1)
    assert math.isnan(reg.get_sample_value("gputide_gpus_health_unknown"))
