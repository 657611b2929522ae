"""ClusterState refuses bookkeeping that would leave it out of step with the hardware."""

from __future__ import annotations

import pytest

from balancer.plan.placement import Placement, PodRequest, Scheduler
from tests.placement.conftest import cluster


def test_release_refuses_a_slot_without_a_gpu():
    """A stray release (a placement never applied, a wrong slot) must not turn a missing GPU into free room."""
    state = cluster((8000, 8000, [1000, 1000], "T4"), (8000, 8000, [500], "T4"))  # node 1: one GPU, slot 1 empty
    with pytest.raises(ValueError):
        Placement(1, (1,), 500, 0, 0).undo(state)
    assert state.gpu_free[1].tolist() == [500, -1]
    where = Scheduler(state, "bestfit").place(PodRequest(1000, 1000, 1, 400))
    assert (where.node, where.slots) != (1, (1,))  # a share never goes to the GPU node 1 does not have
