"""The simulator's training workloads show their job's last checkpoint, as a trainer's `gputide.io/last-checkpoint`
annotation does on Kubernetes: the work a resize would lose, which the capacity plan ranks its victims by. Without
it gputide's plan read 0 s for every job in a simulation, while the tidal baselines were handed the true figure."""

from __future__ import annotations

import pytest

from balancer.plan.capacity import since_checkpoint
from balancer.sim import SimCluster, TrainingJobSpec
from tests.sim.conftest import small_fleet


def test_the_snapshot_shows_each_training_pod_its_jobs_last_checkpoint():
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=4, elastic_min=1, checkpoint_interval_s=1800,
                                         gpu_memory_mib=1000))
    sim.advance_to(2700)   # checkpoint at 30 min, 15 min of work since
    snap = sim.snapshot()
    trainers = [w for w in snap.workloads if w.owner == "j"]
    assert len(trainers) == 4 and all(w.checkpointed_at == pytest.approx(1800.0) for w in trainers)
    # what the capacity view reads from it: the 15 minutes a resize would lose
    assert since_checkpoint(snap.time, [(0, w.checkpointed_at, w.started_at) for w in trainers], 1)[0] == \
        pytest.approx(900.0)
    sim.scale_training("j", 2, checkpoint_first=True)   # a checkpointed resize: nothing since
    assert {w.checkpointed_at for w in sim.snapshot().workloads if w.owner == "j"} == {sim.time}
