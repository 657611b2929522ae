"""Through the loop: a node forgotten while Kubernetes lists it (`ClusterSnapshot.forgotten_nodes`) holds the
services asking for more replicas than telemetry places, said in a note, where the planner shrank training every
cycle to make room for the replicas running there (audit a2)."""

from __future__ import annotations

from dataclasses import replace
from functools import partial

import pytest

from balancer import config
from balancer.actuate.base import ActionResult, Outcome
from balancer.loop import Reconciler
from balancer.model import ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
CHAT = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}


class Dark:
    """n0 of a two-node fleet whose n1 went dark: chat's spec asks 4, two placed on n0; the job on n0's others."""

    def __init__(self, forgotten: frozenset[str]) -> None:
        self.dark, self.time = forgotten, 1000.0

    def snapshot(self):
        wl = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(2)]
        wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
               for i, g in enumerate((2, 3))]
        st = {"chat": ServiceStatus(name="chat", demand_rps=30.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=4,
                                    replicas_from_spec=True)}
        snap = snapshot(make_fleet(nodes=1, gpus_per_node=4), workloads=wl, time=self.time, services=st)
        return replace(snap, forgotten_nodes=self.dark)


class Spy:
    name = "spy"

    def apply(self, action, snapshot):
        return ActionResult(action, Outcome.APPLIED)


@pytest.mark.parametrize("forgotten, shrinks", [(frozenset({"n1"}), 0), (frozenset(), 3)], ids=["dark", "pending"])
def test_a_forgotten_node_holds_the_service_whose_replicas_may_run_there(forgotten, shrinks):
    source = Dark(forgotten)
    rec = Reconciler(source=source, actuator=Spy(), policy=ON, clock=lambda: source.time,
                     planner=partial(plan_with_capacity, profiles=CHAT, capacity_policy=CapacityPolicy()))
    done = []
    for k in range(3):
        source.time = 1000.0 + 60 * k
        report = rec.run_once()
        done += [r.action for r in report.results if r.action.kind == "scale_training"]
    assert len(done) == shrinks   # pending replicas: job 2 -> 1 each cycle (the snapshot never changes)
    said = [n for n in report.plan.notes if n.startswith("capacity holds chat")]
    assert bool(said) == bool(forgotten) and all("n1" in n for n in said)
