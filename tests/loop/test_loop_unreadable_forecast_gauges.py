"""A forecast the capacity planner cannot read is left out of the forecast gauges too, never exported as NaN nor
frozen at the last good value.

2a1da89 left a NaN or step-0 forecast out of the plan, but the loop still gave the forecaster's raw output to
`FleetRecorder`: `gputide_forecast_demand` read NaN, and a step-0 forecast raised ZeroDivisionError in `window_max`
every cycle ('recording forecast metrics failed'), the series frozen at the last good value (auditor a7)."""

from __future__ import annotations

import logging
from functools import partial

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from balancer import config
from balancer.actuate.dryrun import DryRunActuator
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.model import Forecast, ServiceStatus
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from tests.loop.loop_helpers import make_fleet, snapshot, workload

GOOD = np.full(200, 30.0)


def _run(make, cycles=3):
    """Per cycle, the chat samples of gputide_forecast_demand; the planner's forecasts seen, per cycle."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    placed = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(4)]
    chat = {"chat": ServiceStatus(name="chat", demand_rps=30.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=4,
                                  replicas_from_spec=True)}
    clock = [1000.0]
    calls = [0]
    seen = []

    class Source:
        def snapshot(self):
            return snapshot(fl, workloads=placed, time=clock[0], services=chat)

    def forecaster(snap):
        calls[0] += 1
        return {"chat": make(snap, calls[0])}

    planner = partial(plan_with_capacity, capacity_policy=CapacityPolicy(),
                      profiles={"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)})

    def spy(snap, forecasts, policy, state):
        seen.append(sorted(forecasts or {}))
        return planner(snap, forecasts, policy, state)

    registry = CollectorRegistry()
    rec = Reconciler(source=Source(), actuator=DryRunActuator(), clock=lambda: clock[0],
                     policy=config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True)),
                     forecaster=forecaster, metrics=ControllerMetrics(registry), planner=spy)
    samples = []
    for _ in range(cycles):
        assert rec.run_once().status == "ok"
        samples.append({(s.name, s.labels.get("quantile")): s.value for m in registry.collect() for s in m.samples
                        if s.name.startswith("gputide_forecast") and s.labels.get("service") == "chat"})
        clock[0] += 30
    return samples, seen


@pytest.mark.parametrize("how", ["nan", "step-0"])
def test_a_forecast_left_out_of_the_plan_is_left_out_of_the_gauges(how, caplog):
    def make(snap, n):   # good on the first cycle, unreadable after
        if n == 1:
            return Forecast(service="chat", issued_at=snap.time, step_s=60.0, quantiles={0.5: GOOD})
        if how == "nan":
            return Forecast(service="chat", issued_at=snap.time, step_s=60.0, quantiles={0.5: np.full(200, np.nan)})
        return Forecast(service="chat", issued_at=snap.time, step_s=0.0, quantiles={0.5: GOOD})

    with caplog.at_level(logging.INFO):
        samples, seen = _run(make)
    assert samples[0][("gputide_forecast_demand", "0.5")] == 30.0
    assert [s.get(("gputide_forecast_demand", "0.5"), "absent") for s in samples[1:]] == ["absent", "absent"]
    assert seen == [["chat"], [], []]   # the planner saw the same set
    assert "recording forecast metrics failed" not in caplog.text
    assert caplog.text.count("plan: forecast: chat: planned without its forecast") == 1   # once while it lasts


def test_a_readable_forecast_is_still_exported_and_planned():
    samples, seen = _run(lambda snap, n: Forecast(service="chat", issued_at=snap.time, step_s=60.0,
                                                  quantiles={0.5: GOOD}), cycles=2)
    assert [s[("gputide_forecast_demand", "0.5")] for s in samples] == [30.0, 30.0]
    assert seen == [["chat"], ["chat"]]
