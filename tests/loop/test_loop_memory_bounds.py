"""What the reconcile loop keeps between cycles stays bounded on a controller that runs for weeks: the cycle
durations it remembers, and the forecast series of services that are no longer forecast."""

from __future__ import annotations

import numpy as np
from loop_helpers import make_fleet, snapshot
from prometheus_client import CollectorRegistry

from balancer.actuate.dryrun import DryRunActuator
from balancer.config import BalancerPolicy, ForecastPolicy
from balancer.loop import KEEP_DURATIONS, InMemoryLeaderElector, InMemoryLease, Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Forecast

POLICY = BalancerPolicy(forecast=ForecastPolicy(horizon_s=300.0))


class Source:
    def __init__(self) -> None:
        self.fleet, self.time = make_fleet(1, 4), 0.0

    def snapshot(self):
        return snapshot(self.fleet, age=0.0, time=self.time)


def reconciler(source: Source, **kw) -> tuple[Reconciler, CollectorRegistry]:
    reg = CollectorRegistry()
    return Reconciler(source=source, actuator=DryRunActuator(), clock=lambda: source.time, policy=POLICY,
                      metrics=ControllerMetrics(reg), **kw), reg


def test_the_loop_keeps_the_last_cycle_durations_not_every_one():
    source = Source()
    rec, _ = reconciler(source, keep_durations=5)
    for k in range(12):
        source.time = 60.0 * k
        assert rec.run_once().status == "ok"
    assert len(rec.reconcile_seconds) == 5
    default, _ = reconciler(Source())
    assert default.reconcile_seconds.maxlen == KEEP_DURATIONS
    everything, _ = reconciler(Source(), keep_durations=None)   # an offline run's report counts every cycle
    for _ in range(12):
        everything.run_once()
    assert len(everything.reconcile_seconds) == 12


def forecasts_of(*names: str):
    def forecaster(snap):
        return {n: Forecast(service=n, issued_at=snap.time, step_s=60.0,
                            quantiles={0.5: np.full(5, 10.0), 0.9: np.full(5, 20.0)}) for n in names}
    return forecaster


def demand(reg: CollectorRegistry, service: str, quantile: str = "0.9") -> float | None:
    return reg.get_sample_value("gputide_forecast_demand", {"service": service, "quantile": quantile, "horizon": "5m"})


def series(reg: CollectorRegistry) -> set[str]:
    return {s.labels["service"] for m in reg.collect() if m.name == "gputide_forecast_demand" for s in m.samples}


def test_a_service_no_longer_forecast_loses_its_forecast_series():
    source = Source()
    seen = [forecasts_of("chat", "old-svc")] * 3 + [forecasts_of("chat", f"svc-{k}") for k in range(20)]
    rec, reg = reconciler(source, forecaster=lambda snap: seen.pop(0)(snap))
    for k in range(3):
        source.time = 60.0 * k
        rec.run_once()
    assert demand(reg, "old-svc") == 20.0 and demand(reg, "chat", "0.5") == 10.0
    for k in range(3, 23):   # services come and go (renamed, deleted): only this cycle's are reported
        source.time = 60.0 * k
        rec.run_once()
    assert series(reg) == {"chat", "svc-19"}
    assert demand(reg, "old-svc") is None


def test_forecast_series_cleared_on_demotion_come_back_when_leading_again():
    source = Source()
    lease = InMemoryLease(duration_s=90.0)
    a, reg = reconciler(source, forecaster=forecasts_of("chat"), elector=InMemoryLeaderElector(lease, "a"))
    b_elector = InMemoryLeaderElector(lease, "b")
    b, _ = reconciler(source, elector=b_elector)
    assert a.run_once().status == "ok" and demand(reg, "chat") == 20.0
    source.time = 200.0   # a missed its renewals: b takes the Lease, a stands by and stops reporting
    assert b.run_once().status == "ok"
    assert a.run_once().status == "standby" and series(reg) == set()
    b_elector.release()
    source.time = 400.0
    assert a.run_once().status == "ok" and demand(reg, "chat") == 20.0


class Failing:
    """A forecaster that forecasts, then raises (a Prometheus it reads history from is down ...), with the
    controller forecaster's `fallbacks()` for services some of which are gone."""

    def __init__(self) -> None:
        self.fail = False

    def __call__(self, snap):
        if self.fail:
            raise RuntimeError("history query failed")
        return forecasts_of("chat")(snap)

    def fallbacks(self):
        return {("chat", "mstl"): "boom", ("deleted-svc", "mstl"): "boom"}


def test_a_cycle_whose_forecaster_fails_clears_the_forecast_series_instead_of_freezing_them():
    source = Source()
    forecaster = Failing()
    rec, reg = reconciler(source, forecaster=forecaster)
    assert rec.run_once().status == "ok" and demand(reg, "chat") == 20.0
    fallback = {"service": "chat", "model": "mstl"}
    assert reg.get_sample_value("gputide_forecast_fallback", fallback) == 1.0
    # a service the forecaster still lists but no longer forecasts is not reported as served by persistence
    assert reg.get_sample_value("gputide_forecast_fallback", {"service": "deleted-svc", "model": "mstl"}) is None
    forecaster.fail = True
    source.time = 60.0
    assert rec.run_once().status == "ok"   # planned without a forecast
    assert series(reg) == set() and reg.get_sample_value("gputide_forecast_fallback", fallback) is None


def test_the_forecast_gauges_follow_the_cycle_even_when_a_fleet_gauge_fails(monkeypatch):
    import balancer.fleet_record as fr

    source = Source()
    forecaster = Failing()
    rec, reg = reconciler(source, forecaster=forecaster)
    assert rec.run_once().status == "ok" and demand(reg, "chat") == 20.0
    monkeypatch.setattr(fr, "fleet_usage", lambda snap: 1 / 0)   # the capacity / fragmentation gauges fail
    forecaster.fail = True
    source.time = 60.0
    assert rec.run_once().status == "ok"
    assert series(reg) == set()   # the forecast's gauges still cleared, not frozen at the last forecast
