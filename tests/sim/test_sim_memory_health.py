"""The simulator's memory health: ECC counters and the row remapper, and what the snapshot tells the controller."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import small_fleet

from balancer.sim import SimCluster
from balancer.sim.memory import MemoryHealth


@pytest.mark.parametrize(("model", "pending"), [("H100-SXM", True), ("T4", False)],
                         ids=["a board with a row remapper records a pending remap", "a T4 only counts the error"])
def test_a_double_bit_error_makes_the_gpu_memory_unhealthy_until_a_reset(model, pending):
    sim = SimCluster(small_fleet(model=model, nodes=1, gpus=2), seed=0)
    sim.ecc_error(1)
    snap = sim.snapshot()
    assert snap.memory_unhealthy.tolist() == [False, True]
    assert bool(sim.memory.remap_pending[1]) is pending and sim.memory.dbe_volatile[1] == 1
    sim.repair_gpu(1)
    assert not sim.snapshot().memory_unhealthy.any()
    assert sim.memory.remapped_uncorrectable[1] == int(pending)   # the reset applied the remap


def test_correctable_errors_are_counted_and_harm_nothing():
    sim = SimCluster(small_fleet(nodes=1, gpus=2), seed=0)
    sim.memory.correctable(0, errors=50)
    assert sim.memory.sbe_volatile[0] == 50 and not sim.snapshot().memory_unhealthy.any()
    assert sim.healthy.all()


def test_a_reset_applies_pending_remaps_and_after_a_failed_remap_the_repair_is_a_new_board():
    sim = SimCluster(small_fleet(nodes=1, gpus=2), seed=0)
    sim.ecc_error(0)
    sim.repair_gpu(0)
    assert sim.memory.remapped_uncorrectable[0] == 1
    sim.row_remap_failure(0)
    assert sim.snapshot().memory_unhealthy[0] and not sim.healthy[0]
    sim.repair_gpu(0)                               # after a failed remap the repair is a new board
    assert not sim.memory.remap_failure[0] and sim.memory.remapped_uncorrectable[0] == 0
    assert not sim.snapshot().memory_unhealthy.any() and sim.healthy[0]


def test_models_before_ampere_have_no_row_remapper():
    health = MemoryHealth(["H100-SXM", "A100-SXM4-80GB", "L40S", "T4", "V100-SXM2-32GB", "P100-PCIE-16GB"])
    np.testing.assert_array_equal(health.row_remapping, [True, True, True, False, False, False])
    with pytest.raises(ValueError, match="GPU 3 has no row remapper"):
        health.remap_failed(3)
