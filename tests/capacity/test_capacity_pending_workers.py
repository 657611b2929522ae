"""Training workers still pending (asked for, holding no GPU) in the capacity plan: a reclaim frees GPUs only by
removing placed workers, and the GPUs pending workers wait for are no GPUs to grow another job into."""

from __future__ import annotations

from types import MappingProxyType

from balancer.plan.capacity import CapacityView, ServiceCapacity, ServiceView
from balancer.plan.capacity_plan import Pools, plan_capacity
from tests.capacity.settled_state import settled
from tests.capacity.test_capacity_planner import POLICY, forecast, inference_target, job, training_sizes, view


def test_a_reclaim_from_a_job_with_pending_workers_removes_placed_ones():
    # 39 workers asked for, 15 placed: lowering the size to 38 would delete a pending pod and free no GPU
    v = view(3, 30.0, jobs=[job("train-b", 39, gpus=15, emax=64)])
    d = plan_capacity(v, {"chat": forecast([40] * 24)}, POLICY, settled(v))
    assert inference_target(d, 3) == 4
    assert training_sizes(d) == {"train-b": 14}


def test_pools_shrink_counts_from_the_placed_workers():
    v = view(3, 30.0, jobs=[job("train-b", 39, gpus=15, emax=64)])
    pools = Pools(v)
    assert pools.shrink_for(None, 2, allow_suspend=False) == 2
    assert pools.workers["train-b"] == 13


def test_idle_gpus_pending_workers_wait_for_are_not_lent_to_another_job():
    # job a grew onto 26 GPUs a loan was to free, and the loan was held back (the eviction budget): a's 26 workers
    # wait. The loan is planned again; its GPUs are a's, not a second growth's
    prof = ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0, home_replicas=39)
    svc = ServiceView(profile=prof, demand_rps=130.0, replicas=39, gpus_by_model=MappingProxyType({"A100": 39}))
    jobs = (job("a", 39, gpus=13, prio=10, emax=64), job("b", 12, prio=5, emax=64))
    v = CapacityView(time=0.0, free=MappingProxyType({"A100": 0}), services=(svc,), jobs=jobs,
                     inference_gpus=39, training_gpus=25, total_gpus=64)
    d = plan_capacity(v, {"chat": forecast([130] * 24)}, POLICY, settled(v))
    assert inference_target(d, 39) == 13   # frees 26 GPUs, the 26 that a's pending workers wait for
    assert training_sizes(d) == {}   # b is not grown into them


def test_idle_gpus_pending_workers_were_not_placed_on_still_go_to_another_job():
    # 6 GPUs idle in the view while a waits for 26: the scheduler did not give them to a (a node selector, memory),
    # so they are not a's; b grows into them
    v = view(3, 30.0, free=6, jobs=[job("a", 39, gpus=13, prio=10, emax=64), job("b", 12, prio=5, emax=64)])
    d = plan_capacity(v, {"chat": forecast([30] * 24)}, POLICY, settled(v))
    assert training_sizes(d) == {"b": 18}
