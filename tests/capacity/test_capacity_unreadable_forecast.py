"""A NaN or infinite forecast from an injected forecaster is no forecast for its service, never a crashed cycle.

The built-in forecasters fall back to persistence on a non-finite prediction (`balancer.forecast.base.Fallback`); an
injected one's NaN reached `replicas_for` (``math.ceil(nan)``: ValueError), which ended every cycle, hotspot relief
with it, while `gputide_fail_static` stayed 0 (auditor a2, session 31)."""

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
from balancer.model import WorkloadClass as C
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled
from tests.capacity.test_capacity_planner import POLICY, forecast, job, view
from tests.loop.loop_helpers import make_fleet, snapshot, workload


def _broken(how: str) -> Forecast:
    good = np.full(24, 30.0)
    bad = {"nan": np.nan, "inf": np.inf, "-inf": -np.inf}
    if how in bad:
        return Forecast(service="chat", issued_at=0.0, step_s=600.0,
                        quantiles={0.5: good, 0.9: np.where(np.arange(24) == 5, bad[how], good), 0.99: good})
    return Forecast(service="chat", issued_at=np.nan if how == "issued-nan" else 0.0,
                    step_s=0.0 if how == "step-0" else 600.0, quantiles={0.5: good, 0.9: good, 0.99: good})


@pytest.mark.parametrize("how", ["nan", "inf", "-inf", "issued-nan", "step-0"])
@pytest.mark.parametrize(("replicas", "demand"), [(10, 20.0), (3, 60.0)],
                         ids=["a trough it would lend in", "demand above its replicas"])
def test_an_unreadable_forecast_plans_as_none_and_says_so(how, replicas, demand):
    v = view(replicas, demand, jobs=[job("train-a", 4, emax=12)])
    state = settled(v)
    got = plan_capacity(v, {"chat": _broken(how)}, POLICY, state)
    without = plan_capacity(v, {}, POLICY, state)
    assert (got.actions, dict(got.targets), got.split) == (without.actions, dict(without.targets), without.split)
    assert [n for n in got.notes if n not in without.notes] == [
        next(n for n in got.notes if n.startswith("chat: planned without its forecast"))]
    if replicas == 10:   # a good forecast of 30 req/s lends here: the broken one must not
        assert plan_capacity(v, {"chat": forecast([30] * 24)}, POLICY, state).actions != got.actions


def test_a_nan_forecast_leaves_the_cycle_and_its_hotspot_relief_running(caplog):
    fl = make_fleet(nodes=2, gpus_per_node=4)
    placed = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(4)]
    placed += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
               for i, g in enumerate((4, 5))]
    chat = {"chat": ServiceStatus(name="chat", demand_rps=30.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=4,
                                  replicas_from_spec=True)}
    clock = [1000.0]

    class Source:
        def snapshot(self):   # chat-0's GPU near its slowdown temperature
            return snapshot(fl, workloads=placed, time=clock[0], services=chat, temps={0: 95.0})

    def nan_forecaster(snap):
        nan = np.full(200, np.nan)
        return {"chat": Forecast(service="chat", issued_at=snap.time, step_s=60.0,
                                 quantiles={0.1: nan, 0.5: nan, 0.9: nan})}

    registry = CollectorRegistry()
    rec = Reconciler(source=Source(), actuator=DryRunActuator(), clock=lambda: clock[0],
                     policy=config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True)),
                     forecaster=nan_forecaster, metrics=ControllerMetrics(registry),
                     planner=partial(plan_with_capacity, capacity_policy=CapacityPolicy(),
                                     profiles={"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}))
    kinds = []
    with caplog.at_level(logging.INFO, logger="balancer.loop"):
        for _ in range(2):
            report = rec.run_once()
            assert report.status == "ok"
            kinds += [a.kind for a in report.plan.actions if a.target == "inference/chat-0"]
            clock[0] += 30
    assert "migrate" in kinds   # the hot GPU is relieved
    assert registry.get_sample_value("gputide_fail_static") == 0
    assert "forecast: chat: planned without its forecast (hold, or follow current demand up): NaN or infinite " \
           "values in its quantile(s) 0.1, 0.5, 0.9" in caplog.text
