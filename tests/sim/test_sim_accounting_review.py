"""Accounting the simulator got wrong once: work a generic pod keeps across a restart, fractional training."""

from __future__ import annotations

import pytest

from balancer.sim import SimCluster, TrainingJobSpec
from tests.sim.conftest import batch, small_fleet


@pytest.mark.parametrize("move", ["evict", "migrate"])
def test_a_generic_pod_moved_or_evicted_restarts_its_work(move):
    """A generic pod restarts when it is evicted or migrated (`balancer.sim.ops`): 1000 s of work, 600 s done,
    moved: it needs 1000 s again at its new place, not the 400 s it had left."""
    sim = SimCluster(small_fleet(), seed=0)
    sim.submit(batch("a"), duration_s=1000)
    sim.schedule()
    sim.advance_to(600)
    if move == "evict":
        assert sim.evict("batch/a")
    else:
        assert sim.migrate("batch/a", (5,))
    sim.advance_to(600 + 900)   # 900 s more (one step of rescheduling at most): not done yet
    assert "batch/a" in sim.workloads
    sim.advance_to(600 + 1200)
    assert "batch/a" not in sim.workloads


@pytest.mark.parametrize("milli", [1000, 500, 250])
def test_fractional_training_workers_progress_in_proportion_to_the_gpu_they_hold(milli):
    """Two workers of `milli` each on A100s for an hour hold 2 x milli/1000 GPU-hours and make that many
    A100-equivalent GPU-hours of progress (the share was counted twice: half-GPU workers made a quarter)."""
    sim = SimCluster(small_fleet(nodes=1, gpus=2), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=2, gpu_milli=milli, gpu_memory_mib=1000))
    sim.advance_to(3600)
    s = sim.stats()["training"]["j"]
    assert s["gpu_seconds"] / 3600 == pytest.approx(2 * milli / 1000)
    assert s["progress_gpu_hours"] == pytest.approx(2 * milli / 1000, rel=0.02)
