"""A reclaim counts only the training GPUs the new inference replicas could be scheduled on, and a loan lends only
the GPUs its scale-down empties where a worker could be scheduled: a job's GPUs on a cordoned or hot-tainted node
(or unhealthy ones) freed nothing the scale-up could use, so the job was shrunk and the replicas stayed pending. A
shrink counts what it frees at worst: the workers it stops may be those on such GPUs (an Indexed Job stops its highest
indexes, wherever they run), so a job across a cordoned node was shrunk a worker each cycle (audit a4)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from balancer import config
from balancer.model import Forecast, ScaleTraining, ServiceStatus
from balancer.model import WorkloadClass as C
from balancer.plan import planner as planner_mod
from balancer.plan.capacity import CapacityPolicy, ServiceCapacity, view_from_snapshot
from balancer.plan.capacity_loop import plan_with_capacity
from balancer.safety import SafetyGuard, SafetyLedger
from tests.capacity.settled_state import settled
from tests.loop.loop_helpers import make_fleet, snapshot, workload

ON = config.BalancerPolicy(capacity=config.CapacityPolicy(enabled=True))
CHAT = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300)}
A100 = "A100-SXM4-80GB"
TAINTS = ["node.kubernetes.io/unschedulable:NoSchedule", "gputide.io/hot=true:NoSchedule"]


def chat(demand: float, replicas: int, p99: float = 0.9) -> dict[str, ServiceStatus]:
    return {"chat": ServiceStatus(name="chat", demand_rps=demand, p99_latency_s=p99, slo_latency_s=0.5,
                                  replicas=replicas)}


def job(snap):
    return next(j for j in view_from_snapshot(snap, CHAT).jobs if j.name == "job")


def _reclaim(n1_taint: str, job_gpus=(4, 5, 6, 7)):
    """chat (30 req/s at 10 a replica) on GPU 0; a fixed job fills the rest of n0, the elastic `job` holds
    `job_gpus`; n1 carries `n1_taint`, which chat's pods do not tolerate (the job's were placed before it)."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    nodes = (fl.nodes[0], replace(fl.nodes[1], taints=(n1_taint,) if n1_taint else ()))
    wl = [(workload("chat-0", owner="chat"), (0,))]
    wl += [(workload(f"fixed-{i}", C.TRAINING, owner="fixed"), (g,)) for i, g in enumerate((1, 2, 3))
           if g not in job_gpus]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate(job_gpus)]
    return snapshot(fl, workloads=wl, time=1000.0, services=chat(30.0, 1), nodes=nodes)


def _sizes(snap, fc=None, state=None):
    plan, _ = plan_with_capacity(snap, fc or {}, ON, state, profiles=CHAT, capacity_policy=CapacityPolicy())
    review = SafetyGuard(ON.safety).review(plan.actions, snap, SafetyLedger(), snap.time)
    assert not review.rejected
    return [(a.target, a.previous_workers, a.workers) if isinstance(a, ScaleTraining)
            else (a.target, a.previous_replicas, a.replicas) for a in review.accepted]


@pytest.mark.parametrize("taint", TAINTS, ids=["cordoned", "hot"])
def test_a_job_on_a_node_the_replicas_cannot_be_scheduled_on_is_not_shrunk_for_them(taint):
    snap = _reclaim(taint)
    assert (dict(job(snap).gpus_by_model), dict(job(snap).reclaimable_by_model)) == ({A100: 4}, {})
    assert _sizes(snap) == []   # was: job 4 -> 1 and chat 1 -> 4, whose new replicas could only stay pending


def test_without_the_taint_the_same_reclaim_shrinks_the_job():
    assert _sizes(_reclaim("")) == [("job", 4, 1), ("chat", 1, 4)]


@pytest.mark.parametrize("taint", TAINTS, ids=["cordoned", "hot"])
def test_a_job_across_nodes_is_not_shrunk_where_the_workers_it_stops_may_all_be_on_the_tainted_node(taint):
    snap = _reclaim(taint, job_gpus=(3, 4, 5, 6, 7))   # one worker on n0, four on cordoned n1
    assert (dict(job(snap).gpus_by_model), dict(job(snap).reclaimable_by_model)) == ({A100: 5}, {A100: 1})
    # its four spare workers may be the four on n1: was job 5 -> 4 and chat 1 -> 2, then 4 -> 3, 3 -> 2, 2 -> 1 each
    # cycle, the replica pending all along
    assert _sizes(snap) == []


@pytest.mark.parametrize("taint", TAINTS, ids=["cordoned", "hot"])
def test_a_job_across_nodes_is_shrunk_by_what_frees_its_usable_gpus_at_worst(taint):
    snap = _reclaim(taint, job_gpus=(2, 3, 4))   # two workers on n0, one on n1: stopping two frees one of n0's
    assert _sizes(snap) == [("job", 3, 1), ("chat", 1, 2)]   # was: chat 1 -> 3, counting both freed


def test_a_job_whose_usable_gpus_make_no_whole_worker_is_not_shrunk():
    """2-GPU workers and replicas: of the job's GPUs only GPU 2 can take a replica (3 is unhealthy, n1 cordoned)."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    nodes = (fl.nodes[0], replace(fl.nodes[1], taints=(TAINTS[0],)))
    wl = [(workload("chat-0", owner="chat", gpus=2), (0, 1))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8, gpus=2), g)
           for i, g in enumerate(((2, 3), (4, 5), (6, 7)))]
    snap = snapshot(fl, workloads=wl, time=1000.0, services=chat(20.0, 1), nodes=nodes)
    xid = np.zeros(snap.n_gpus, dtype=np.int64)
    xid[3] = 79
    profiles = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300, gpus_per_replica=2)}
    plan, _ = plan_with_capacity(replace(snap, xid=xid), {}, ON, None, profiles=profiles,
                                 capacity_policy=CapacityPolicy())
    assert [a for a in plan.actions if isinstance(a, ScaleTraining)] == []   # was: job 3 -> 2, freeing no replica


def test_an_unhealthy_gpu_a_job_holds_is_not_counted_for_a_reclaim():
    snap = _reclaim("")
    xid = np.zeros(snap.n_gpus)
    xid[[4, 5, 6]] = 79   # fallen off the bus: no new pod can use them
    snap = replace(snap, xid=xid)
    assert dict(job(snap).reclaimable_by_model) == {A100: 1}


def _loan(n1_taint: str):
    """chat at 1 req/s on GPUs 0 (n0) and 4 (n1, `n1_taint`): its forecast lends one of its two replicas; the job
    on n0's other GPUs could grow into the GPU the loan empties."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    nodes = (fl.nodes[0], replace(fl.nodes[1], taints=(n1_taint,) if n1_taint else ()))
    wl = [(workload(f"chat-{k}", owner="chat"), (g,)) for k, g in enumerate((0, 4))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate((1, 2, 3))]
    wl += [(workload(f"batch-{i}", C.BATCH, owner="batch"), (g,)) for i, g in enumerate((5, 6, 7))]
    t = 100_000.0
    snap = snapshot(fl, workloads=wl, nodes=nodes, time=t, services=chat(1.0, 2, p99=0.1))
    fc = {"chat": Forecast(service="chat", issued_at=t - 300, step_s=300.0,
                           quantiles={q: np.full(30, 1.0) for q in (0.5, 0.9, 0.99)})}
    return snap, fc, planner_mod.PlannerState(capacity=settled(view_from_snapshot(snap, CHAT)))


def test_a_loan_lends_no_gpu_its_scale_down_may_empty_only_on_a_cordoned_node():
    # either replica may go; the one left may be n0's, so the GPU emptied may be n1's, where no worker can go
    assert _sizes(*_loan(TAINTS[0])) == [("chat", 2, 1)]   # was: and job 3 -> 4, its new worker pending
    assert _sizes(*_loan("")) == [("chat", 2, 1), ("job", 3, 4)]


def test_no_shrink_goes_out_for_a_reclaim_that_frees_no_whole_replica_at_worst():
    """2-GPU replicas; the job's three lowest workers on hot-tainted n0, two on n1 beside chat: stopping four frees
    one usable GPU at worst, half a replica (audit a8: job 5 -> 1 went out, and no replica came of it)."""
    fl = make_fleet(nodes=2, gpus_per_node=4)
    nodes = (replace(fl.nodes[0], taints=(TAINTS[1],)), fl.nodes[1])
    wl = [(workload("chat-0", owner="chat", gpus=2), (4, 5))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (g,))
           for i, g in enumerate((0, 1, 2, 6, 7))]
    snap = snapshot(fl, workloads=wl, time=1000.0, services=chat(10.0, 1, p99=0.6), nodes=nodes)
    profiles = {"chat": ServiceCapacity(name="chat", rps_per_replica=10, warmup_s=300, gpus_per_replica=2)}
    plan, _ = plan_with_capacity(snap, {}, ON, None, profiles=profiles, capacity_policy=CapacityPolicy())
    assert [a for a in plan.actions if isinstance(a, ScaleTraining)] == []   # was: job 5 -> 1
    assert "capacity: chat: wants 1 more replicas, only 0 GPUs' worth can be freed" in plan.notes


def test_a_shrink_that_frees_a_whole_replica_at_worst_still_goes_out():
    """1-GPU replicas, the job's lowest worker on an unhealthy GPU: stopping two frees one usable GPU at worst."""
    wl = [(workload("chat-0", owner="chat"), (0,))]
    wl += [(workload(f"job-{i}", C.TRAINING, owner="job", elastic_min=1, elastic_max=8), (1 + i,)) for i in range(3)]
    snap = snapshot(make_fleet(nodes=1, gpus_per_node=4), workloads=wl, time=1000.0, services=chat(20.0, 2, p99=1.5))
    xid = np.zeros(snap.n_gpus, dtype=np.int64)
    xid[1] = 79
    assert _sizes(replace(snap, xid=xid)) == [("job", 3, 1)]   # for chat's replica asked already: no second ask
