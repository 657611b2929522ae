"""While a node is forgotten, a service counted from its pods is left out of the plan (`CapacityView.uncounted`): its
count may miss replicas on the dark node. Its idle GPUs are not lent to training meanwhile: left out, it kept none,
and a service under latency pressure (p99 3x its SLO) saw the idle GPU it would have scaled onto go to a job
(audit a10: job 1 -> 2 with an unrelated node forgotten, chat 2 -> 3 without)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from balancer import config
from balancer.model import ScaleInference, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity
from balancer.plan.capacity_loop import plan_with_capacity
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
CHAT = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}


def actions(forgotten: dict[str, int], p99: float, demand: float) -> list[tuple[str, int, int]]:
    wl = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(2)]
    wl += [(workload("job-0", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (2,))]
    st = {"chat": ServiceStatus(name="chat", demand_rps=demand, p99_latency_s=p99, slo_latency_s=0.5, replicas=2,
                                replicas_from_spec=False)}
    snap = replace(snapshot(make_fleet(nodes=1, gpus_per_node=4), workloads=wl, time=1000.0, services=st),
                   forgotten_nodes=forgotten)
    plan, _ = plan_with_capacity(snap, {}, ON, None, profiles=CHAT, capacity_policy=CapacityPolicy())
    return [(a.target, a.previous_workers, a.workers) if isinstance(a, ScaleTraining)
            else (a.target, a.previous_replicas, a.replicas)
            for a in plan.actions if isinstance(a, ScaleTraining | ScaleInference)]


@pytest.mark.parametrize("p99, demand", [(1.5, 30.0), (0.1, 20.0)], ids=["latency-pressure", "calm"])
def test_no_idle_gpu_is_lent_while_a_pod_counted_service_is_left_out(p99: float, demand: float) -> None:
    assert not [a for a in actions({"n1": 8}, p99, demand) if a[0] == "job"]


def test_without_a_forgotten_node_the_same_fleet_is_planned() -> None:
    assert ("chat", 2, 3) in actions({}, 1.5, 30.0)   # the latency net steps onto the idle GPU


def test_only_the_idle_gpus_of_its_models_are_kept() -> None:
    """The left-out service may use A100s only: the idle H100s still go to a job (audit a12: every loan stopped,
    across every model, while any node was forgotten)."""
    a100, h100 = "A100-SXM4-80GB", "H100-SXM"
    chat = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300, models=frozenset({a100}))}
    wl = [(workload(f"chat-{i}", owner="chat"), (i,)) for i in range(3)]   # n0 (A100): one GPU idle
    wl += [(workload("job-0", C.TRAINING, owner="job", elastic_min=1, elastic_max=16), (4,))]   # on n1 (H100)
    st = {"chat": ServiceStatus(name="chat", demand_rps=20.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=3,
                                replicas_from_spec=False)}
    fleet = make_fleet(nodes=3, gpus_per_node=4, models=[a100, h100, h100])
    snap = replace(snapshot(fleet, workloads=wl, time=1000.0, services=st), forgotten_nodes={"n2": 4})
    plan, _ = plan_with_capacity(snap, {}, ON, None, profiles=chat, capacity_policy=CapacityPolicy())
    grown = [a for a in plan.actions if isinstance(a, ScaleTraining) and a.workers > a.previous_workers]
    # the 7 idle H100s (n1's 3, n2's 4: the snapshot still lists them), not n0's idle A100
    assert [(a.target, a.previous_workers, a.workers) for a in grown] == [("job", 1, 8)]
