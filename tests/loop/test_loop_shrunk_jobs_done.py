"""A hotspot shrink's record ends when it is done with, so it neither blocks a second shrink nor counts again.

gputide's own resizes (the capacity planner's tide, co-location) remove the record once they leave the job at its
size before the shrink or more, or find the record void (`SimActuator`, as `k8s_jobs.shrink_patch` on a Job), and the
planner treats a job already back at that size as done (`shrink_records.shrunk_jobs`): no give-back, and the hotspot
planner may shrink it again.
"""

from __future__ import annotations

from loop_helpers import make_fleet, snapshot, workload
from test_loop_shrunk_jobs import POLICY, cycle, hot_job_cluster, shrink

from balancer.actuate.base import Outcome
from balancer.actuate.sim import SimActuator
from balancer.model import ScaleTraining, WorkloadClass
from balancer.plan.planner import PlannerState, plan

FL = make_fleet(2, 4)


def gputide_resize(sim, workers: int) -> None:
    """A resize by another part of gputide than the hotspot planner (the tide, co-location): no shrink record."""
    action = ScaleTraining(reason="capacity: test", job="job", workers=workers, previous_workers=sim.workers("job"))
    assert SimActuator(sim).apply(action, sim.snapshot()).outcome is Outcome.APPLIED


def job_pods(n: int, shrunk_from: int = 0):
    return [(workload(f"job-{i}", WorkloadClass.TRAINING, owner="job", elastic_min=1, priority=10,
                      shrunk_from=shrunk_from), (i,)) for i in range(n)]


def test_a_job_back_at_its_size_before_the_shrink_is_done_whichever_record_says_so():
    for state, shrunk_from in ((PlannerState(shrunk={"job": 4}), 0), (PlannerState(), 4), (PlannerState(), 3)):
        p, after = plan(snapshot(FL, workloads=job_pods(4, shrunk_from)), None, POLICY, state)
        assert not [a for a in p.actions if isinstance(a, ScaleTraining)] and not after.shrunk


def test_a_job_still_short_of_its_size_stays_owed():
    _, after = plan(snapshot(FL, workloads=job_pods(3)), None, POLICY, PlannerState(shrunk={"job": 4}))
    assert dict(after.shrunk) == {"job": 4}


def test_a_job_grown_back_by_gputide_loses_its_record_and_is_shrunk_again_while_its_gpu_stays_hot():
    sim, _ = hot_job_cluster()
    state = shrink(sim)
    assert sim.shrink_records and dict(state.shrunk) == {"job": 4}
    gputide_resize(sim, 4)   # grown back; the hotspot planner's memory did not see it (co-location's give-back)
    assert not sim.shrink_records
    again = []
    for _ in range(6):
        scaled, state = cycle(sim, state)
        again += [a for a in scaled if a.workers < a.previous_workers]
    assert again and again[0].shrunk_from is not None and again[0].shrunk_from > again[0].workers


def test_a_record_voided_by_someone_else_is_removed_by_gputides_next_resize_and_never_counts_again():
    sim, node = hot_job_cluster()
    shrink(sim)
    sim.scale_training("job", 2)      # the operator's size: the record (4 -> 3) is void, and stays on the job
    assert sim.shrink_records
    gputide_resize(sim, 1)            # the tide: a void record goes with its resize
    assert not sim.shrink_records
    sim.scale_training("job", 3)      # the operator again, to exactly the record's old "to"
    sim.restore_cooling(node)
    state = PlannerState()            # a restarted controller: only the job could tell it
    for _ in range(2 * POLICY.hotspots.cool_readings + 2):
        scaled, state = cycle(sim, state)
        assert not scaled and sim.workers("job") == 3
    assert not state.shrunk


def test_a_resize_short_of_the_size_before_the_shrink_keeps_a_valid_record():
    sim, _ = hot_job_cluster()
    shrink(sim)
    gputide_resize(sim, 2)   # the tide takes one more: the record stays (void now: the job's size is not its "to")
    assert sim.shrink_records
    gputide_resize(sim, 3)   # back at the old "to": the void record goes rather than counting again
    assert not sim.shrink_records
