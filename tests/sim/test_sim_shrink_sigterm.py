"""A training shrink costs in the simulator what it costs on Kubernetes, and that depends on the trainer.

The Kubernetes actuator lowers the Job's parallelism: the removed workers get SIGTERM. A trainer that saves a
checkpoint on SIGTERM within its grace period (`TrainingJobSpec.checkpoint_on_sigterm`, a Job's
`gputide.io/checkpoint-on-sigterm: "true"`) loses nothing; any other goes back to its last checkpoint, the cost the
capacity plan prices (`JobView.since_checkpoint_s`). The simulator's actuator used to checkpoint every shrink first
for free, so reclaiming loaned GPUs never lost work and the tidal comparison credited the policies that resize.
"""

from __future__ import annotations

import math

import pytest

from balancer.actuate.sim import SimActuator
from balancer.model import ScaleTraining
from balancer.plan.capacity import since_checkpoint, view_from_snapshot
from balancer.sim import SimCluster, TrainingJobSpec
from tests.sim.conftest import small_fleet


def _job_at(seconds: float, *, saves: bool | None = None) -> SimCluster:
    sim = SimCluster(small_fleet(), seed=0)
    extra = {} if saves is None else {"checkpoint_on_sigterm": saves}
    sim.add_training_job(TrainingJobSpec(name="j", workers=4, elastic_min=1, checkpoint_interval_s=1800,
                                         gpu_memory_mib=1000, **extra))
    sim.advance_to(seconds)
    return sim


def _shrink(sim: SimCluster) -> dict:
    result = SimActuator(sim).apply(ScaleTraining(job="j", workers=2, previous_workers=4, reason="reclaim"),
                                    sim.snapshot())
    assert result.outcome == "applied" and sim.workers("j") == 2
    return sim.stats()["training"]["j"]


@pytest.mark.parametrize("saves", [None, False], ids=["default", "explicit"])
def test_a_shrink_of_a_job_that_does_not_checkpoint_on_sigterm_loses_the_work_since_its_checkpoint(saves):
    s = _shrink(_job_at(2700, saves=saves))   # checkpoint at 30 min, 15 min of 4 workers since: 1 A100 GPU-hour
    assert s["preemptions"] == 1
    assert s["lost_work_gpu_hours"] == pytest.approx(1.0, rel=0.05)
    assert s["progress_gpu_hours"] == pytest.approx(2.0, rel=0.05)


def test_a_shrink_of_a_job_that_checkpoints_on_sigterm_loses_nothing():
    s = _shrink(_job_at(2700, saves=True))
    assert s["preemptions"] == 0 and s["lost_work_gpu_hours"] == 0.0
    assert s["progress_gpu_hours"] == pytest.approx(3.0, rel=0.05)


def test_the_snapshot_says_what_a_resize_would_lose_as_kubernetes_does():
    lossy, saving = _job_at(2700), _job_at(2700, saves=True)
    for sim, lost in ((lossy, 900.0), (saving, 0.0)):
        snap = sim.snapshot()
        trainers = [w for w in snap.workloads if w.owner == "j"]
        assert since_checkpoint(snap.time, [(0, w.checkpointed_at, w.started_at) for w in trainers], 1)[0] == \
            pytest.approx(lost)
        (job,) = view_from_snapshot(snap, {}).jobs
        assert job.since_checkpoint_s == pytest.approx(lost) and (job.restart_cost_gpu_h == 0) == (lost == 0)
    assert all(math.isinf(w.checkpointed_at) for w in saving.snapshot().workloads if w.owner == "j")
