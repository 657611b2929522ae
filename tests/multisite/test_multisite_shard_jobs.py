"""A training Job with workers on two shards' nodes is resized by neither shard.

`ScaleTraining` sets a Job's size outright (`workers`, the actuator's parallelism), and each planner derives that
size from the workers it sees. A shard's cut keeps the workers placed on its own nodes only, so a shard that saw 2
of a Job's 4 workers shrank it "by one" to 1 worker (the hotspot's last resort), or lent or reclaimed by its own
count (capacity shifting), and both shards could resize the same Job in one cycle. As a service spread over two
shards is scaled by neither, a job spread over two shards is shown to each as not elastic (its owner's size), with no
shrink record to give back; its workers still occupy their GPUs and may still be migrated or throttled."""

from __future__ import annotations

from balancer import config
from balancer.app.capacity_run import CapacityLoopPlanner
from balancer.model import ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan import planner
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity
from balancer.telemetry.shard import parse_selector, restrict
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
CHAT = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}


def spread_job(**extra):
    """Two nodes of 4 GPUs; Job "a" (elastic 1..8) runs 2 workers on each node, chat 1 replica on n0's GPU 0 and
    wants 3."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload(f"a-{i}", C.TRAINING, owner="a", elastic_min=1, elastic_max=8, **extra), (g,))
          for i, g in enumerate((1, 2, 4, 5))]
    wl.append((workload("chat-0", owner="chat"), (0,)))
    status = ServiceStatus(name="chat", demand_rps=25.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=1)
    return snapshot(fl, workloads=wl, time=1000.0, services={"chat": status})


def cut(snap, node):
    return restrict(snap, parse_selector(node, f"node={node}"))[0]


def resizes(plan):
    return [a for a in plan.actions if isinstance(a, ScaleTraining)]


def test_capacity_shifting_in_a_shard_does_not_resize_a_job_spread_over_two_shards():
    snap = spread_job()
    unsharded = CapacityLoopPlanner(CHAT, CapacityPolicy(), 60.0)(snap, {}, ON)[0]
    assert [(a.job, a.previous_workers) for a in resizes(unsharded)] == [("a", 4)]   # the whole Job's size
    planner_ = CapacityLoopPlanner(CHAT, CapacityPolicy(), 60.0, sharded=True)
    assert resizes(planner_(cut(snap, "n0"), {}, ON)[0]) == []


def test_a_hotspot_in_a_shard_does_not_shrink_a_job_spread_over_two_shards():
    """n0's GPUs 1 and 2 (job a's, its workers not movable) run past slowdown with power already at the floor: the
    hotspot planner's last resort shrinks the job. Unsharded it goes from 4 workers to 3; n0's shard saw 2 and
    asked for 1."""
    policy = config.BalancerPolicy()
    snap = spread_job(movable=False)
    hot = snapshot(make_fleet(nodes=2, gpus_per_node=4), workloads=[(w, snap.placements[w.name])
                                                                    for w in snap.workloads],
                   temps={1: 95.0, 2: 95.0}, power={1: 200.0, 2: 200.0}, limits={1: 200.0, 2: 200.0}, time=1000.0)
    assert [(a.workers, a.previous_workers) for a in resizes(_plan(hot, policy))] == [(3, 4)]
    assert resizes(_plan(cut(hot, "n0"), policy)) == []


def _plan(snap, policy):
    state = None
    for k in range(6):   # enough readings for the hotspot to be active
        plan, state = planner.plan(snap.replace(time=snap.time + 30 * k), None, policy, state)
    return plan


def test_a_job_wholly_inside_a_shard_stays_that_shards_to_resize():
    snap = spread_job()
    inside = snap.replace(placements={**snap.placements, "training/a-2": (1,), "training/a-3": (2,)})
    part = cut(inside, "n0")
    assert {w.elastic_max for w in part.workloads if w.owner == "a"} == {8}


def test_a_spread_jobs_shrink_record_is_given_back_by_neither_shard():
    snap = spread_job(shrunk_from=6)
    for node in ("n0", "n1"):
        part = cut(snap, node)
        workers = [w for w in part.workloads if w.owner == "a"]
        assert len(workers) == 2 and all(w.elastic_max == 0 and w.shrunk_from == 0 for w in workers)
    assert all(w.shrunk_from == 6 for w in snap.workloads if w.owner == "a")   # the full snapshot untouched


def test_a_shard_counts_the_pending_workers_of_its_own_job_as_the_whole_cluster_does():
    """Job "a" runs 3 workers on n0 and asks for a 4th, pending (no node yet); n1 is full of job "b". The shard cut
    dropped every pod without a node, so n0's shard saw a 3-worker Job and resized a Job of 4 as one of 3. The
    reclaim takes 2 GPUs: both planners set the Job to 1 (its pending worker goes first and frees nothing, so the
    size counts down from the 3 placed: b4bfc09; before, 4 -> 2 freed one GPU), from the Job's 4."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    wl = [(workload(f"a-{i}", C.TRAINING, owner="a", elastic_min=1, elastic_max=8), (g,))
          for i, g in enumerate((1, 2, 3))]
    wl += [(workload(f"b-{i}", C.TRAINING, owner="b", elastic_min=4, elastic_max=4), (g,))
           for i, g in enumerate((4, 5, 6, 7))]
    wl.append((workload("chat-0", owner="chat"), (0,)))
    status = ServiceStatus(name="chat", demand_rps=25.0, p99_latency_s=0.1, slo_latency_s=0.5, replicas=1)
    snap = snapshot(fl, workloads=wl, time=1000.0, services={"chat": status})
    snap = snap.replace(workloads=(*snap.workloads, workload("a-3", C.TRAINING, owner="a", elastic_min=1,
                                                             elastic_max=8)))
    unsharded = CapacityLoopPlanner(CHAT, CapacityPolicy(), 60.0)(snap, {}, ON)[0]
    sharded = CapacityLoopPlanner(CHAT, CapacityPolicy(), 60.0, sharded=True)(cut(snap, "n0"), {}, ON)[0]
    assert [(a.job, a.workers, a.previous_workers) for a in resizes(unsharded)] == [("a", 1, 4)]
    assert [(a.job, a.workers, a.previous_workers) for a in resizes(sharded)] == [("a", 1, 4)]
    assert "training/a-3" not in cut(snap, "n1").workload_by_name   # n1's shard has no worker of "a"
