"""A job that checkpoints on SIGTERM loses nothing on every path that stops one of its workers with SIGTERM, not
only gputide's shrink: a migrated or evicted worker gets SIGTERM as a removed one does, and an operator's resize
(the raw `SimCluster.scale_training`, `kubectl scale`) lowers the Job's parallelism as gputide's does. A job that
does not goes back to its last checkpoint on each of them, the whole job (a distributed job's workers restart from
it). A crash (a failed GPU) sends no SIGTERM: every job loses the work since its checkpoint. Before, only
`SimActuator`'s shrink asked the simulator to checkpoint first, so migrations, evictions and operators' resizes
of such a job lost work in every simulation."""

from __future__ import annotations

import pytest

from balancer.actuate.sim import SimActuator
from balancer.model import Migrate
from balancer.sim import SimCluster, TrainingJobSpec
from tests.sim.conftest import small_fleet

WORKER = "training/j-w0"


def _job_at(seconds: float, *, saves: bool) -> SimCluster:
    sim = SimCluster(small_fleet(), seed=0)
    sim.add_training_job(TrainingJobSpec(name="j", workers=4, elastic_min=1, checkpoint_interval_s=1800,
                                         gpu_memory_mib=1000, checkpoint_on_sigterm=saves))
    sim.advance_to(seconds)
    return sim


def _free_gpu(sim: SimCluster) -> int:
    held = {g for gpus in sim.placements.values() for g in gpus}
    return next(g for g in range(sim.n_gpus) if g not in held)


def _evict(sim: SimCluster) -> None:
    assert sim.evict(WORKER)


def _migrate(sim: SimCluster) -> None:
    assert sim.migrate(WORKER, (_free_gpu(sim),))


def _migrate_by_actuator(sim: SimCluster) -> None:
    target = _free_gpu(sim)
    action = Migrate(workload=WORKER, source_gpus=sim.placements[WORKER], target_gpus=(target,),
                     target_node=sim.fleet.gpus[target].node, reason="cool")
    assert SimActuator(sim).apply(action, sim.snapshot()).outcome == "applied"


def _operator_resize(sim: SimCluster) -> None:
    sim.scale_training("j", 2)
    assert sim.workers("j") == 2


PATHS = [_evict, _migrate, _migrate_by_actuator, _operator_resize]
IDS = ["evict", "migrate", "actuator-migrate", "operator-resize"]


@pytest.mark.parametrize("stop", PATHS, ids=IDS)
def test_a_job_that_checkpoints_on_sigterm_loses_nothing_whichever_path_stops_its_worker(stop):
    sim = _job_at(2700, saves=True)   # checkpoint at 30 min, 15 min of 4 workers since: 1 A100 GPU-hour
    stop(sim)
    s = sim.stats()["training"]["j"]
    assert s["preemptions"] == 0 and s["lost_work_gpu_hours"] == 0.0
    assert s["progress_gpu_hours"] == pytest.approx(3.0, rel=0.05)


@pytest.mark.parametrize("stop", PATHS, ids=IDS)
def test_a_job_that_does_not_goes_back_to_its_last_checkpoint_whichever_path_stops_its_worker(stop):
    sim = _job_at(2700, saves=False)
    stop(sim)
    s = sim.stats()["training"]["j"]
    assert s["preemptions"] == 1
    assert s["lost_work_gpu_hours"] == pytest.approx(1.0, rel=0.05)   # the whole job's, not one worker's
    assert s["progress_gpu_hours"] == pytest.approx(2.0, rel=0.05)


@pytest.mark.parametrize("saves", [True, False])
def test_a_failed_gpu_sends_no_sigterm_so_every_job_loses_the_work_since_its_checkpoint(saves):
    sim = _job_at(2700, saves=saves)
    sim.fail_gpu(sim.placements[WORKER][0])
    s = sim.stats()["training"]["j"]
    assert s["preemptions"] == 1 and s["lost_work_gpu_hours"] == pytest.approx(1.0, rel=0.05)
