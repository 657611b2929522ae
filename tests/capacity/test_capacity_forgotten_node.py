"""Through the loop: while a node is forgotten while Kubernetes lists it (`ClusterSnapshot.forgotten_nodes`), a
service's replicas asked beyond those telemetry places count as running there, as many as its GPUs hold, said in a
note, where the planner shrank training every cycle to make room for the replicas running there (audit a2). A bound,
not a hold: an urgent scale-up beyond it still gets room, and idle GPUs are still kept for the replicas it may need
(audit a4: any forgotten node held every such service, and lent its idle GPUs)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from functools import partial

import numpy as np
import pytest

from balancer import config
from balancer.actuate.base import ActionResult, Outcome
from balancer.loop import Reconciler
from balancer.model import Forecast, ScaleInference, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_loop import plan_with_capacity
from tests.capacity.settled_state import settled
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
CHAT = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}


class Dark:
    """n0 of a two-node fleet whose n1 went dark: chat's spec asks 4, two placed on n0; the job on n0's others."""

    def __init__(self, forgotten: Mapping[str, int], spec: bool = True, p99: float = 0.1) -> None:
        self.dark, self.time, self.spec, self.p99 = forgotten, 1000.0, spec, p99

    def snapshot(self):
        wl = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(2)]
        wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
               for i, g in enumerate((2, 3))]
        # counted from its pods (no replicas series), chat sees only the two on n0
        st = {"chat": ServiceStatus(name="chat", demand_rps=30.0, p99_latency_s=self.p99, slo_latency_s=0.5,
                                    replicas=4 if self.spec else 2, replicas_from_spec=self.spec)}
        snap = snapshot(make_fleet(nodes=1, gpus_per_node=4), workloads=wl, time=self.time, services=st)
        return replace(snap, forgotten_nodes=self.dark)


class Spy:
    name = "spy"

    def apply(self, action, snapshot):
        return ActionResult(action, Outcome.APPLIED)


def _run(source, cycles: int = 3):
    rec = Reconciler(source=source, actuator=Spy(), policy=ON, clock=lambda: source.time,
                     planner=partial(plan_with_capacity, profiles=CHAT, capacity_policy=CapacityPolicy()))
    done = []
    for k in range(cycles):
        source.time = 1000.0 + 60 * k
        report = rec.run_once()
        done += [r.action for r in report.results]
    return done, report


@pytest.mark.parametrize("spec", [True, False], ids=["spec", "counted-from-pods"])
@pytest.mark.parametrize("forgotten, shrinks", [({"n1": 2}, 0), ({}, 3)], ids=["dark", "pending"])
def test_a_forgotten_node_counts_the_replicas_that_may_run_there(forgotten, shrinks, spec):
    """Counted from its pods, chat reads 2 with or without the forgotten node: the pending control does not apply."""
    done, report = _run(Dark(forgotten, spec))
    shrunk = [a for a in done if a.kind == "scale_training"]
    assert len(shrunk) == (shrinks if spec else 0 if forgotten else 3)   # was: job 2 -> 1 each cycle
    said = [n for n in report.plan.notes if n.startswith(
        "capacity counts 2 of chat replicas as running unseen on n1" if spec
        else "capacity leaves chat alone while telemetry has forgotten n1")]
    assert bool(said) == bool(forgotten)


@pytest.mark.parametrize("dark, p99", [({"n1": 2}, 1.5), ({"n1": 8}, 1.5), ({"n1": 8}, 0.1)])
def test_a_service_counted_from_its_pods_is_neither_scaled_nor_lent_while_a_node_is_forgotten(dark, p99):
    """Its count may miss pods on n1 or not (a8: none of chat's ran on n1, a training node): counted with all n1
    may hold, its 2 pods were sent a scale to 11 under pressure (and to 5 from the 4 it may run with n1 at 2)."""
    done, report = _run(Dark(dark, spec=False, p99=p99), cycles=1)
    assert done == []   # was: job 2 -> 1 and chat 10 -> 11 (n1 at 8), 4 -> 5 (n1 at 2)
    assert any(n.startswith("capacity leaves chat alone while telemetry has forgotten n1 (gputide_gpus_forgotten): "
                            "counted from its pods") for n in report.plan.notes)


def test_a_forecast_scales_no_service_counted_from_its_pods_while_a_node_is_forgotten():
    """a8's podcount_fc: a forecast needing 7 replicas sent chat 10 -> 13 (2 pods seen, 8 counted on n1 unseen) and
    job 6 -> 3; with n1 reporting the same plan is chat 2 -> 7, job 6 -> 1."""
    t = 100_000.0

    def plan(dark):
        wl = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(2)]
        wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
               for i, g in enumerate(range(2, 8))]
        st = {"chat": ServiceStatus(name="chat", demand_rps=20.0, p99_latency_s=0.3, slo_latency_s=0.5, replicas=2,
                                    replicas_from_spec=False)}
        snap = replace(snapshot(make_fleet(nodes=2, gpus_per_node=4), workloads=wl, time=t, services=st),
                       forgotten_nodes=dark)
        fc = {"chat": Forecast(service="chat", issued_at=t - 300, step_s=300.0,
                               quantiles={q: np.full(30, 60.0) for q in (0.5, 0.9, 0.99)})}
        state = planner_mod.PlannerState(capacity=settled(view_from_snapshot(snap, CHAT)))
        return _plan(snap, fc, state)

    assert plan({"n1": 8}) == []
    assert plan({}) == [("job", 6, 1), ("chat", 2, 7)]


def _unrelated(forgotten: Mapping[str, int], demand: float, trained: tuple[int, ...]):
    """a4's fleet: chat asks 2, one placed on n0 (none could be on n3, which never held it), p99 3x its SLO; the
    job on `trained`; n3 forgotten or not."""
    wl = [(workload("chat-0", owner="chat"), (0,))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate(trained)]
    st = {"chat": ServiceStatus(name="chat", demand_rps=demand, p99_latency_s=1.5, slo_latency_s=0.5, replicas=2,
                                replicas_from_spec=True)}
    return replace(snapshot(make_fleet(nodes=2, gpus_per_node=4), workloads=wl, time=1000.0, services=st),
                   forgotten_nodes=forgotten)


def _plan(snap, forecasts=None, state=None):
    plan, _ = plan_with_capacity(snap, forecasts or {}, ON, state, profiles=CHAT, capacity_policy=CapacityPolicy())
    return [(a.target, a.previous_workers, a.workers) if isinstance(a, ScaleTraining)
            else (a.target, a.previous_replicas, a.replicas) for a in plan.actions
            if isinstance(a, ScaleTraining | ScaleInference)]


@pytest.mark.parametrize("trained, shrunk", [((1, 2, 3, 4, 5, 6, 7), ("job", 7, 2)), ((1, 2, 3), ("job", 3, 2))],
                         ids=["full", "idle"])
def test_an_urgent_scale_up_beyond_what_the_forgotten_gpus_hold_is_made_room_for(trained, shrunk):
    """Demand needs 7 replicas: one of the two asked may run on n3 (4 GPUs), the other five get room (held whole,
    nothing went out, and n1's idle GPUs were lent to the job: 3 -> 7). Without n3 forgotten, one more."""
    assert _plan(_unrelated({"n3": 4}, 60.0, trained)) == [shrunk, ("chat", 2, 7)]
    assert _plan(_unrelated({}, 60.0, trained)) == [(shrunk[0], shrunk[1], shrunk[2] - 1), ("chat", 2, 7)]


def test_idle_gpus_are_kept_for_the_replicas_counted_on_the_forgotten_node():
    """Demand needs 1: chat's second replica may run on n3 or be pending: the GPU it would take is not lent."""
    assert _plan(replace(_unrelated({"n3": 4}, 5.0, (1, 2, 3)), services={"chat": ServiceStatus(
        name="chat", demand_rps=5.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=2, replicas_from_spec=True)})) \
        == [("job", 3, 6)]   # was 3 -> 7: n1's idle GPUs all lent
