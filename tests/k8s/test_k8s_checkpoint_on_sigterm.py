"""A training Job whose trainer saves a checkpoint when its workers get SIGTERM (preemption-aware checkpointing
within the grace period) says so with `gputide.io/checkpoint-on-sigterm: "true"`. Lowering its parallelism then
loses no work, so its pods read a checkpoint that is always current (+inf) and the capacity planner prices its
shrink at 0 GPU-h: among jobs of one priority it is shrunk before one that would lose its work since its last
checkpoint. The simulator's `TrainingJobSpec.checkpoint_on_sigterm` shows the same in its snapshot."""

from __future__ import annotations

import math

from fakeapi import FakeKube, job, pod
from test_k8s_workloads import with_meta

from balancer.actuate.k8s_workloads import KubernetesWorkloads
from balancer.plan.capacity import CapacityView, JobView, since_checkpoint
from balancer.plan.capacity_pools import Pools

NOW = 1_796_342_400.0   # 2026-12-04T00:00:00Z


def add_job(kube: FakeKube, name: str, note: str | None, checkpoint_age_s: float) -> None:
    j = job(name, "ml", parallelism=2)
    j["metadata"]["annotations"] = {"gputide.io/checkpoint-on-sigterm": note} if note is not None else {}
    kube.add(j)
    notes = {"gputide.io/elastic-min": "1", "gputide.io/elastic-max": "8",
             "gputide.io/last-checkpoint": str(NOW - checkpoint_age_s)}
    for i in range(2):
        kube.add(with_meta(pod(f"{name}-{i}", "ml", owner=("Job", name)), annotations=notes))


def read(kube: FakeKube, api, clock) -> dict[str, float]:
    """Each job's seconds of work a resize loses, as the capacity view computes them from its pods."""
    got = list(KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)().values())
    owners = sorted({w.owner for w in got})
    ages = since_checkpoint(NOW, [(owners.index(w.owner), w.checkpointed_at, w.started_at) for w in got], len(owners))
    return dict(zip(owners, ages.tolist(), strict=True))


def test_only_a_job_that_says_true_loses_nothing_on_a_resize(kube: FakeKube, api, clock):
    add_job(kube, "saver", "true", checkpoint_age_s=7200.0)
    add_job(kube, "plain", None, checkpoint_age_s=600.0)
    add_job(kube, "vague", "yes", checkpoint_age_s=600.0)   # only "true" counts, as for the other Job annotations
    assert read(kube, api, clock) == {"saver": 0.0, "plain": 600.0, "vague": 600.0}
    workloads = KubernetesWorkloads(api, ttl_s=60.0, clock=clock, sleep=lambda s: None)()
    assert all(math.isinf(w.checkpointed_at) == (w.owner == "saver") for w in workloads.values())


def test_the_planner_shrinks_the_job_that_checkpoints_on_sigterm_first(kube: FakeKube, api, clock):
    """Two jobs of one priority: the saver's checkpoint is two hours old, the plain job's ten minutes; without the
    annotation the plain job (0.33 GPU-h lost) would be shrunk before the saver (4 GPU-h)."""
    add_job(kube, "saver", "true", checkpoint_age_s=7200.0)
    add_job(kube, "plain", None, checkpoint_age_s=600.0)
    lost = read(kube, api, clock)
    jobs = tuple(JobView(name=name, workers=2, elastic_min=1, elastic_max=8, priority=5, since_checkpoint_s=age,
                         gpus_by_model={"A100-SXM4-80GB": 2}) for name, age in lost.items())
    assert {j.name: j.restart_cost_gpu_h for j in jobs} == {"plain": 600.0 / 3600 * 2, "saver": 0.0}
    pools = Pools(CapacityView(time=NOW, free={}, services=(), jobs=jobs, inference_gpus=0, training_gpus=4,
                               total_gpus=4))
    assert pools.shrink_for(None, 1, allow_suspend=False) == 1
    assert pools.workers == {"plain": 2, "saver": 1}
