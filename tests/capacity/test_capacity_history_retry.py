"""A demand-history query that failed at start-up is asked again (audit a6, t_seed / t_warm).

The forecaster and the burst tracker marked a service seeded whatever the history query answered, so a Prometheus
timeout on the first cycle meant the service was never seeded: the burst allowance stayed 0.0 and, an hour of night
demand later, the forecaster issued its first forecast from that hour alone and the planner lent replicas on it.
Now a failure (not "Prometheus has no data", which counts as seeded) is asked again on later cycles, at most one
failed query a cycle, logged once; until the history is read the service gets no forecast (the planner holds it).
"""

from __future__ import annotations

import logging
from types import MappingProxyType, SimpleNamespace

import numpy as np
import pandas as pd

from balancer.app.capacity_run import CapacityLoopPlanner, PrometheusDemandHistory
from balancer.errors import TelemetryUnavailable
from balancer.forecast.online import DemandForecaster
from balancer.forecast.service import ServiceForecaster
from balancer.plan.capacity import CapacityPolicy, CapacityView, JobView, ServiceCapacity, ServiceView
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled

T0 = 1_750_000_000.0


class Prometheus:
    """`demand_history` that fails while `down`, answers a daily wave (or nothing, with `empty`) otherwise."""

    def __init__(self, down: bool = True, empty: bool = False) -> None:
        self.down, self.empty, self.asked = down, empty, []

    def demand_history(self, promql, start, end, step):
        self.asked.append((promql, end))
        if self.down:
            raise TelemetryUnavailable("prometheus timeout")
        if self.empty:
            return None
        idx = pd.date_range(pd.Timestamp(start, unit="s", tz="UTC"), pd.Timestamp(end, unit="s", tz="UTC"),
                            freq="600s")
        return pd.Series(50 + 40 * np.sin(np.arange(len(idx)) / 144 * 2 * np.pi), index=idx)


def snap(t: float, *names: str, demand: float = 50.0):
    return SimpleNamespace(time=t, services={n: SimpleNamespace(demand_rps=demand) for n in names}, demand_unknown={})


def forecaster(prom: Prometheus, **kw) -> ServiceForecaster:
    online = DemandForecaster(model="persistence", step_s=600.0, min_history=kw.pop("min_history", 6))
    return ServiceForecaster(online, 7200.0, history=PrometheusDemandHistory(prom, days=14, step_s=600.0), **kw)


def test_a_failed_history_query_is_asked_again_and_seeds_the_service_once_answered():
    prom = Prometheus()
    fc = forecaster(prom)
    assert fc(snap(T0, "chat")) == {} and len(prom.asked) == 1
    assert fc.unseeded() == ["chat"] and "chat" not in fc.seeded
    assert fc(snap(T0 + 30, "chat")) == {} and len(prom.asked) == 2   # still down: asked again, once a cycle
    prom.down = False
    out = fc(snap(T0 + 60, "chat"))
    # read, and seeded with two weeks at once: a forecast this very cycle, not an hour of watching later
    assert len(prom.asked) == 3 and "chat" in out and fc.seeded == {"chat"} and fc.unseeded() == []
    for k in range(3, 30):
        fc(snap(T0 + 30 * k, "chat"))
    assert len(prom.asked) == 3   # seeded: never asked again


def test_prometheus_answering_no_data_counts_as_seeded():
    prom = Prometheus(down=False, empty=True)
    fc = forecaster(prom, min_history=2)
    for k in range(0, 3 * 40):
        out = fc(snap(T0 + 30 * k, "new"))
    assert len(prom.asked) == 1 and fc.seeded == {"new"} and "new" in out   # a new service learns from what it sees


def test_while_prometheus_is_down_one_query_fails_a_cycle_logged_once_and_all_are_read_when_it_is_back(caplog):
    prom = Prometheus()
    fc = forecaster(prom)
    names = ("a", "b", "c")
    with caplog.at_level(logging.DEBUG, logger="balancer.app.capacity_run"):
        for k in range(6):
            assert fc(snap(T0 + 30 * k, *names)) == {}
        assert len(prom.asked) == 6   # one failed query a cycle, not one per service
        assert sorted({q for q, _ in prom.asked}) == sorted(f'max(gputide_inference_demand_rps{{service="{n}"}})'
                                                            for n in names)   # taking turns
        warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
        assert len(warnings) == 3   # each service's failure warned about once
        prom.down = False
        fc(snap(T0 + 180, *names))
        assert fc.seeded == set(names) and len(prom.asked) == 9   # every one read in the cycle that finds it back
    assert fc.unseeded() == []


def test_an_unseeded_service_gets_no_forecast_and_the_planner_does_not_lend_on_an_hour_of_night():
    """t_warm: a restart whose history query failed; Prometheus stays down; an hour of night demand (20 req/s of a
    service whose home is 12 replicas). The forecaster issued a forecast from that hour alone and the planner lent 9
    of the 12 replicas; now the service has no forecast and the planner holds it."""
    prom = Prometheus()
    fc = forecaster(prom)
    live_only = ServiceForecaster(DemandForecaster(model="persistence", step_s=600.0, min_history=6), 7200.0)
    t = T0 // 86400 * 86400
    for k in range(int(1.5 * 3600 / 30)):
        out = fc(snap(t + 30 * k, "chat", demand=20.0))
        was = live_only(snap(t + 30 * k, "chat", demand=20.0))
    assert out == {} and "chat" in was
    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, home_replicas=12, max_replicas=12)
    s = ServiceView(profile=prof, demand_rps=20.0, replicas=12, gpus_by_model=MappingProxyType({"A100": 12}))
    j = JobView(name="train", workers=4, elastic_max=16, gpus_by_model=MappingProxyType({"A100": 4}))
    v = CapacityView(time=t + 1.5 * 3600, free=MappingProxyType({"A100": 0}), services=(s,), jobs=(j,),
                     inference_gpus=12, training_gpus=4, total_gpus=16)
    assert plan_capacity(v, was, CapacityPolicy(), settled(v)).actions   # what the hour alone would have lent
    assert not plan_capacity(v, out, CapacityPolicy(), settled(v)).actions


def test_the_burst_tracker_is_seeded_once_prometheus_is_back_sharing_the_cycles_failed_query():
    prom = Prometheus()
    history = PrometheusDemandHistory(prom, days=14, step_s=600.0)
    fc = ServiceForecaster(DemandForecaster(model="persistence", step_s=600.0), 7200.0, history=history)
    planner = CapacityLoopPlanner({"chat": ServiceCapacity(name="chat", rps_per_replica=10)}, CapacityPolicy(), 30,
                                  history=history)
    fc(snap(T0, "chat"))
    assert planner.bursts(snap(T0, "chat")) == {"chat": 0.0}
    assert len(prom.asked) == 1   # the forecaster and the burst tracker share the cycle's failed query
    prom.down = False
    later = snap(T0 + 900, "chat")
    fc(later)
    burst = planner.bursts(later)["chat"]
    assert len(prom.asked) == 2 and burst > 0.0   # learned from the history read now (the bursts in the wave)
    seeded_at_once = CapacityLoopPlanner({"chat": ServiceCapacity(name="chat", rps_per_replica=10)},
                                         CapacityPolicy(), 30, history=history).bursts(later)["chat"]
    assert burst > 0.5 * seeded_at_once
