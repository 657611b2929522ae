"""Accounting the simulator got wrong once: work a generic pod kept across a restart."""

from __future__ import annotations

import pytest

from balancer.sim import SimCluster
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
