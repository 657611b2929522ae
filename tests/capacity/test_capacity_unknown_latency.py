"""The capacity planner reads an unknown p99 (demand, no latency series) as no latency evidence, never as calm.

The serving source read a missing p99 as 0 s: `view_from_snapshot` made it latency pressure 0, calm, and the planner
lent the service's GPUs to training while its latency was only unseen (a renamed vLLM histogram looked perfect). It
is NaN now (`serving.LATENCY_UNKNOWN`): not calm (no loan), and no emergency growth either (no pressure read).
"""

from __future__ import annotations

import math

import numpy as np

from balancer.model import Forecast, ScaleInference, WorkloadClass
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_plan import plan_capacity
from balancer.telemetry.serving import read_services
from tests.capacity.settled_state import settled
from tests.loop.loop_helpers import make_fleet, snapshot, workload

PROF = ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)
POLICY = CapacityPolicy()
FL = make_fleet(nodes=2, gpus_per_node=4)
PODS = [(workload(f"chat-{k}", owner="chat"), (k,)) for k in range(4)]
PODS += [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
         for i, g in enumerate((4, 5, 6, 7))]


def decide(demand: str, **p99: str):
    rows = [{"metric": {"__name__": "gputide_inference_demand_rps", "service": "chat"}, "value": [0, demand]},
            {"metric": {"__name__": "gputide_inference_replicas", "service": "chat"}, "value": [0, "4"]}]
    rows += [{"metric": {"__name__": "gputide_inference_latency_p99_seconds", "service": "chat"}, "value": [0, v]}
             for v in p99.values()]
    snap = snapshot(FL, workloads=PODS, time=100_000.0,
                    services=read_services(rows, tuple(w for w, _ in PODS), {}, 0.5)[0])
    view = view_from_snapshot(snap, {"chat": PROF})
    forecast = {"chat": Forecast(service="chat", issued_at=view.time - 300, step_s=300.0,
                                 quantiles={q: np.full(60, float(demand)) for q in (0.5, 0.9, 0.99)})}
    d = plan_capacity(view, forecast, POLICY, settled(view))
    return view.services[0].latency_pressure, [a.replicas for a in d.actions if isinstance(a, ScaleInference)]


def test_a_calm_p99_lends_the_spare_replicas():
    pressure, scales = decide("5", p99="0.1")
    assert pressure == 0.2 and scales and scales[0] < 4


def test_demand_without_a_p99_series_is_not_calm_no_loan():
    for p99 in ({}, {"p99": "NaN"}):
        pressure, scales = decide("5", **p99)
        assert math.isnan(pressure) and scales == [], p99


def test_an_idle_service_without_a_p99_is_still_calm():
    pressure, scales = decide("0")
    assert pressure == 0.0 and scales and scales[0] < 4
