"""A node whose exporter went dark is forgotten after `forget_vanished_after_s` while Kubernetes still lists it: its
pods leave the snapshot with its GPUs, and a service's replicas running there read as pending. Planned so, a reclaim
shrank training every cycle to make room for replicas that ran (audit a2: job 2 -> 1 each cycle). While a node is
forgotten (`view_from_snapshot`'s `forgotten`), a service's replicas asked beyond those placed count as running there,
as many as its GPUs hold: no room is made for them, and the asks beyond that bound are pending as ever (audit a4: the
whole service was held, so any forgotten node held every urgent scale-up, and lent its idle GPUs to training)."""

from __future__ import annotations

import numpy as np

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


def test_the_replicas_asked_beyond_those_placed_count_as_running_on_the_forgotten_node():
    view, actions = _actions(_dark(30.0), forgotten={"n1": 8})
    assert dict(view.unseen) == {"chat": 2}
    assert [(s.replicas, s.desired, s.unseen) for s in view.services] == [(4, 4, 2)]
    assert actions == []   # was (no forgotten input): job 6 -> 4 to make room for replicas that ran


def test_only_as_many_as_the_forgotten_gpus_hold():
    """One GPU of n1 forgotten (the others report, or it had one): one of chat's two asks beyond those placed may run
    there, the other is pending, and a reclaim makes room for it (the whole service was held)."""
    view, actions = _actions(_dark(30.0), forgotten={"n1": 1})
    assert [(s.replicas, s.desired, s.unseen) for s in view.services] == [(3, 4, 1)]
    assert actions == [("job", 6, 5)]


def test_a_node_known_by_name_only_holds_as_many_gpus_as_the_widest_node():
    view, _ = _actions(_dark(30.0, chat_replicas=12), forgotten=("n1",))   # n0 has 8: up to 8 unseen
    assert [(s.replicas, s.desired, s.unseen) for s in view.services] == [(10, 12, 8)]


def test_a_loan_credits_only_the_gpus_certainly_freed():
    """chat counted at 4 (2 of them unseen) lends down to 1: whichever replicas go, one of the GPUs seen empties."""
    view, actions = _actions(_dark(1.0), forgotten={"n1": 8}, forecasts=_flat(1.0))
    assert actions == [("chat", 4, 1), ("job", 6, 7)]


def test_with_no_node_forgotten_the_replicas_asked_beyond_those_placed_are_pending():
    """The same snapshot is a service whose replicas wait for GPUs training holds: the reclaim is right there."""
    view, actions = _actions(_dark(30.0))
    assert view.unseen == {} and [(s.replicas, s.desired) for s in view.services] == [(2, 4)]
    assert actions == [("job", 6, 4)]   # GPUs freed for the replicas asked already: no second request


def test_another_service_is_planned_while_a_node_is_forgotten():
    view, actions = _actions(_dark(30.0, api=25.0), forgotten=("n1",))
    assert dict(view.unseen) == {"chat": 2} and [s.profile.name for s in view.services] == ["api", "chat"]
    assert actions == [("job", 5, 3), ("api", 1, 3)]


def test_a_service_whose_replicas_are_all_placed_is_planned_while_a_node_is_forgotten():
    view, actions = _actions(_dark(30.0, chat_replicas=2), forgotten=("n1",))
    assert view.unseen == {} and [(s.replicas, s.desired) for s in view.services] == [(2, 2)]
    assert actions == [("job", 6, 4), ("chat", 2, 4)]


def test_a_service_counted_from_its_pods_is_left_out_while_a_node_is_forgotten():
    """Its pods on n1 are not seen at all (no replicas series: `replicas_from_spec` False): 2 counted where 4 may run,
    or 2 where 2 run. Planned from 2, it was scaled up and training shrunk every cycle (audit a4); counted with all
    n1 holds, its 2 pods were sent a scale to 11 (audit a8). No count to scale it to: left out, nothing lent."""
    for demand in (30.0, 1.0):
        view, actions = _actions(_dark(demand, chat_replicas=2, spec=False), forgotten={"n1": 2},
                                 forecasts=_flat(demand))
        assert (view.services, view.uncounted, dict(view.unseen)) == ((), ("chat",), {})
        assert actions == []
    view, _ = _actions(_dark(30.0, chat_replicas=2, spec=False))
    assert view.uncounted == () and [s.replicas for s in view.services] == [2]   # no node forgotten: planned


def _half(spec: int, forgotten, demand: float = 20.0):
    """chat's half-GPU replicas (gpu_milli 500): two placed on GPU 0, the rest of its spec on n1; the job on 1-7."""
    wl = [(workload(f"chat-{i}", owner="chat", milli=500), (0,)) for i in range(2)]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate(range(1, 8))]
    snap = snapshot(make_fleet(nodes=1, gpus_per_node=8), workloads=wl, time=T,
                    services={"chat": status("chat", demand, spec)})
    return _actions(snap, forgotten=forgotten)


def test_a_forgotten_gpu_holds_as_many_fractional_replicas_as_share_it():
    """Two half-GPU replicas ran on n1's one GPU: both count there (the bound read 1 GPU / 1 GPU a replica, so the
    other read pending, and training was shrunk for it every cycle: audit a8)."""
    view, actions = _half(4, {"n1": 1})
    assert [(s.replicas, s.desired, s.unseen) for s in view.services] == [(4, 4, 2)]
    assert actions == []   # was: job 7 -> 6
    view, actions = _half(5, {"n1": 1}, 40.0)   # a third beyond the two the GPU holds is pending: room made
    assert [(s.replicas, s.desired, s.unseen) for s in view.services] == [(4, 5, 2)]
    assert actions == [("job", 7, 6)]


def test_a_replica_of_two_gpus_is_counted_whole_node_by_node():
    """Two forgotten nodes of one dark GPU each hold no replica of 2 GPUs: chat's asks beyond those placed (its 2
    GPUs seen are one replica of 2) are all pending. Summed first (2 dark GPUs // 2), one was counted running unseen,
    and room was made for one too few."""
    wide = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300, gpus_per_replica=2)}
    view = view_from_snapshot(_dark(30.0), wide, forgotten={"n1": 1, "n2": 1})
    assert [(s.replicas, s.desired, s.unseen) for s in view.services] == [(1, 4, 0)]
    view = view_from_snapshot(_dark(30.0), wide, forgotten={"n1": 2, "n2": 1})
    assert [(s.replicas, s.desired, s.unseen) for s in view.services] == [(2, 4, 1)]
