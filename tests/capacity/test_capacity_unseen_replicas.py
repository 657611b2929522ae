"""A node whose exporter went dark is forgotten after `forget_vanished_after_s` while Kubernetes still lists it: its
pods leave the snapshot with its GPUs, and a service's replicas running there read as pending. Planned so, a reclaim
shrank training every cycle to make room for replicas that ran (audit a2: job 2 -> 1 each cycle). While a node is
forgotten (`view_from_snapshot`'s `forgotten`), a service asking for more replicas than are placed is held."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.model import Forecast, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan.capacity import CapacityPolicy, CapacityState, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_plan import plan_capacity
from tests.capacity.settled_state import settled
from tests.loop.loop_helpers import make_fleet, snapshot, workload

PROFILES = {n: ServiceCapacity(name=n, rps_per_replica=10, warmup_s=300) for n in ("chat", "api")}
T = 100_000.0


def status(name: str, demand: float, replicas: int, spec: bool = True) -> ServiceStatus:
    return ServiceStatus(name=name, demand_rps=demand, p99_latency_s=0.1, slo_latency_s=0.5, replicas=replicas,
                         replicas_from_spec=spec)


def _dark(demand: float, api: float | None = None, chat_replicas: int = 4, spec: bool = True):
    """What is left of the fleet once n1 is forgotten: n0's 8 GPUs, chat's two replicas on 0-1 (its spec says 4: the
    other two ran on n1), the elastic job on 2-7; `api` (demand), when given, has its one replica on GPU 7 instead."""
    wl = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(2)]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate(range(2, 7 if api is not None else 8))]
    services = {"chat": status("chat", demand, chat_replicas, spec)}
    if api is not None:
        wl += [(workload("api-0", owner="api"), (7,))]
        services["api"] = status("api", api, 1)
    return snapshot(make_fleet(nodes=1, gpus_per_node=8), workloads=wl, time=T, services=services)


def _flat(level: float) -> dict[str, Forecast]:
    return {"chat": Forecast(service="chat", issued_at=T - 300, step_s=300.0,
                             quantiles={q: np.full(30, level) for q in (0.5, 0.9, 0.99)})}


def _actions(snap, forgotten=(), forecasts=None):
    view = view_from_snapshot(snap, PROFILES, forgotten=forgotten)
    state = settled(view_from_snapshot(snap, PROFILES)) if forecasts else CapacityState()
    decision = plan_capacity(view, forecasts or {}, CapacityPolicy(allow_suspend=False), state)
    return view, [(a.target, a.previous_workers, a.workers) if isinstance(a, ScaleTraining)
                  else (a.target, a.previous_replicas, a.replicas) for a in decision.actions]


@pytest.mark.parametrize("demand, forecasts", [(30.0, None), (1.0, _flat(1.0))], ids=["reclaim", "loan"])
def test_a_service_asking_for_more_replicas_than_are_placed_is_held_while_a_node_is_forgotten(demand, forecasts):
    snap = _dark(demand)
    view, actions = _actions(snap, forgotten=("n1",), forecasts=forecasts)
    assert (view.services, view.unseen, view.inference_gpus) == ((), ("chat",), 2)   # its GPUs still inference's
    assert actions == []   # was: job 6 -> 4 (reclaim); chat 4 -> 1 and job 6 -> 7 (loan)


def test_with_no_node_forgotten_the_replicas_asked_beyond_those_placed_are_pending():
    """The same snapshot is a service whose replicas wait for GPUs training holds: the reclaim is right there."""
    view, actions = _actions(_dark(30.0))
    assert view.unseen == () and [(s.replicas, s.desired) for s in view.services] == [(2, 4)]
    assert actions == [("job", 6, 4)]   # GPUs freed for the replicas asked already: no second request


def test_a_service_with_every_replica_placed_is_planned_while_a_node_is_forgotten():
    view, actions = _actions(_dark(30.0, api=25.0), forgotten=("n1",))
    assert view.unseen == ("chat",) and [s.profile.name for s in view.services] == ["api"]
    assert actions == [("job", 5, 3), ("api", 1, 3)]


@pytest.mark.parametrize("spec", [True, False], ids=["spec", "counted-from-pods"])
def test_a_service_whose_replicas_are_all_placed_is_planned_while_a_node_is_forgotten(spec):
    view, actions = _actions(_dark(30.0, chat_replicas=2, spec=spec), forgotten=("n1",))
    assert view.unseen == () and [(s.replicas, s.desired) for s in view.services] == [(2, 2)]
    assert actions == [("job", 6, 4), ("chat", 2, 4)]
