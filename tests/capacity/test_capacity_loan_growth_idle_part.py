"""The idle part of a growth into the GPUs idle already and a loan's (`ScaleTraining.idle_workers`): the workers the
GPUs idle already hold, which the loop sends alone when the loan does not go (`balancer.loop._idle_part`). Counted
in whole workers of the job's GPUs per worker, and none where alone they would leave a suspended job below its
elastic minimum; nor does a suspended job resume below it from GPUs idle already alone (`Pools._grow`)."""

from __future__ import annotations

from types import MappingProxyType

from balancer.actions import ScaleTraining
from balancer.plan.capacity import CapacityView, JobView, ServiceCapacity, ServiceView
from balancer.plan.capacity_pools import Pools

CHAT = ServiceView(profile=ServiceCapacity(name="chat", rps_per_replica=10.0, warmup_s=300.0), demand_rps=20.0,
                   replicas=4, gpus_by_model=MappingProxyType({"A100": 4}))


def suspended(emin: int) -> JobView:
    """A job with no pods (suspended, `capacity.view_from_snapshot`), at most three workers."""
    return JobView(name="s", workers=0, elastic_min=emin, elastic_max=3)


def growth(job: JobView, free: int, lent: int) -> ScaleTraining | None:
    """`job`'s growth in a pass with `free` A100s idle and chat lending `lent` replicas (one A100 each)."""
    held = sum(job.gpus_by_model.values())
    pools = Pools(CapacityView(time=0.0, free=MappingProxyType({"A100": free}), services=(CHAT,), jobs=(job,),
                               inference_gpus=4, training_gpus=held, total_gpus=4 + held + free))
    if lent:
        pools.release(CHAT, CHAT.replicas - lent)
    pools.grow_training(1.0)
    return next(iter(pools.training_actions("tide", "reclaim", {}, 1.0)), None)


def test_a_suspended_job_resumed_from_idle_gpus_and_a_loans_has_no_idle_part_below_its_minimum() -> None:
    # 0 -> 3 from one idle A100 and chat's two: alone, the idle one would resume it at 1, below its minimum 2
    a = growth(suspended(emin=2), free=1, lent=2)
    assert a is not None and (a.previous_workers, a.workers, a.service) == (0, 3, "chat")
    assert (a.idle_workers, a.idle_gain) == (0, 0.0)   # before: 1, sent alone 0 -> 1 when the loan did not go


def test_a_suspended_job_resumed_at_its_minimum_from_idle_gpus_keeps_its_idle_part() -> None:
    a = growth(suspended(emin=2), free=2, lent=1)
    assert a is not None and (a.previous_workers, a.workers, a.service, a.idle_workers) == (0, 3, "chat", 2)
    assert a.idle_gain > 0


def test_a_suspended_job_is_not_resumed_below_its_minimum_from_idle_gpus_alone() -> None:
    assert growth(suspended(emin=2), free=1, lent=0) is None   # before: 0 -> 1, a worker that runs no step
    a = growth(suspended(emin=2), free=2, lent=0)
    assert a is not None and (a.previous_workers, a.workers, a.service) == (0, 2, "")


def test_the_idle_part_counts_whole_workers_of_the_jobs_gpus_per_worker() -> None:
    # two GPUs a worker: three idle A100s hold one worker, the fourth GPU of the second worker is chat's loan's
    job = JobView(name="w", workers=1, elastic_min=1, elastic_max=3, gpus_per_worker=2,
                  gpus_by_model=MappingProxyType({"A100": 2}))
    a = growth(job, free=3, lent=2)
    assert a is not None and (a.previous_workers, a.workers, a.service) == (1, 3, "chat")
    assert a.idle_workers == 1 and a.idle_gain > 0   # counted in GPUs (min(k, idle)): 2, one of them pending
