"""Sharded controllers (`gputide run --shard`) and a service none of whose replicas is placed: the shard cut
(`telemetry.shard.restrict`) keeps a service unless a placed replica of it sits outside the shard, so a service
with no placed replica is kept by every shard. Each shard's planner then reclaimed the GPUs for its whole demand
from its own training jobs: two shards shrank twice what the service needed. A sharded planner leaves such a
service to nobody (as it does a service spread over two shards); one with a replica placed in the shard is its."""

from __future__ import annotations

from balancer import config
from balancer.app.capacity_run import CapacityLoopPlanner
from balancer.model import ScaleInference, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.telemetry.shard import parse_selector, restrict
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
CHAT = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}


def fleet_snapshot(chat_placed: bool):
    """Two nodes of 4 GPUs, one training job on each (elastic 1..4); chat wants 3 replicas and has one placed on
    n0's GPU 0 (`chat_placed`) or none anywhere (every replica pending)."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    first = (1, 2, 3) if chat_placed else (0, 1, 2, 3)
    wl = [(workload(f"a-{i}", C.TRAINING, owner="a", elastic_min=1, elastic_max=4), (g,)) for i, g in enumerate(first)]
    wl += [(workload(f"b-{i}", C.TRAINING, owner="b", elastic_min=1, elastic_max=4), (g,))
           for i, g in enumerate((4, 5, 6, 7))]
    if chat_placed:
        wl.append((workload("chat-0", owner="chat"), (0,)))
    status = ServiceStatus(name="chat", demand_rps=25.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=1)
    return snapshot(fl, workloads=wl, time=1000.0, services={"chat": status})


def shard_plans(snap):
    planner = CapacityLoopPlanner(CHAT, CapacityPolicy(), 60.0, sharded=True)
    return {name: planner(restrict(snap, parse_selector(name, f"node={name}"))[0], {}, ON)[0] for name in ("n0", "n1")}


def shrunk(plan) -> int:
    return sum(a.previous_workers - a.workers for a in plan.actions if isinstance(a, ScaleTraining))


def test_a_service_with_no_placed_replica_is_reclaimed_for_by_no_shard():
    plans = shard_plans(fleet_snapshot(chat_placed=False))
    assert sum(shrunk(p) for p in plans.values()) == 0
    assert not any(isinstance(a, ScaleInference) for p in plans.values() for a in p.actions)


def test_a_service_with_a_replica_in_one_shard_is_that_shards_alone():
    plans = shard_plans(fleet_snapshot(chat_placed=True))
    assert shrunk(plans["n0"]) > 0 and shrunk(plans["n1"]) == 0
    assert [a.replicas for a in plans["n0"].actions if isinstance(a, ScaleInference)] == [3]


def test_unsharded_the_service_with_no_placed_replica_is_still_planned():
    snap = fleet_snapshot(chat_placed=False)
    assert [s.profile.name for s in view_from_snapshot(snap, CHAT).services] == ["chat"]
    plan = CapacityLoopPlanner(CHAT, CapacityPolicy(), 60.0)(snap, {}, ON)[0]
    assert [a.replicas for a in plan.actions if isinstance(a, ScaleInference)] == [3] and shrunk(plan) == 3


def test_without_the_fix_both_shards_would_reclaim():
    """The double reclaim the sharded planner prevents: unsharded planners on the two shard cuts shrink both jobs."""
    snap = fleet_snapshot(chat_placed=False)
    plans = [CapacityLoopPlanner(CHAT, CapacityPolicy(), 60.0)(restrict(snap, parse_selector(n, f"node={n}"))[0],
                                                               {}, ON)[0] for n in ("n0", "n1")]
    assert [shrunk(p) for p in plans] == [3, 3]
