"""Consolidation planning, the fragmentation metric, and the anti-starvation queue functions."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.plan.defrag import Ledger, fragmentation_by_model, make_room, plan_consolidation
from balancer.plan.placement import Placement, PodRequest, Scheduler, WorkloadMix
from balancer.plan.queueing import backfill, effective_priority, queue_order, reservation_time, wait_report
from tests.placement.conftest import cluster

WHOLE = PodRequest(1000, 1000, 1, 1000, name="whole")
HALF = PodRequest(1000, 1000, 1, 500, name="half")
MIX = WorkloadMix.from_pods([WHOLE, HALF])


def two_half_used_gpus():
    """Two nodes, each with one GPU half taken: 1 GPU idle in total, but no whole GPU free."""
    state = cluster((8000, 8000, [1000], "T4"), (8000, 8000, [1000], "T4"))
    sched, ledger = Scheduler(state, "gputide", MIX), Ledger()
    for node in (0, 1):
        where = Placement(node, (0,), 500, 1000, 1000)
        sched.commit(where, HALF)
        ledger.add(HALF, where)
    return sched, ledger


def test_make_room_moves_one_half_pod_to_free_a_whole_gpu():
    sched, ledger = two_half_used_gpus()
    assert sched.place(WHOLE) is None
    placement, moves = make_room(sched, ledger, WHOLE, max_moves=1)
    assert len(moves) == 1 and moves[0].target.node != placement.node
    assert sorted(sched.state.gpu_free[:, 0].tolist()) == [0, 0]


@pytest.mark.parametrize(
    ("budget", "max_moves"),
    [(lambda pod, src, dst: False, 2), (None, 0)],
    ids=["the safety budget refuses every move", "no moves allowed"],
)
def test_make_room_leaves_state_untouched_when_it_cannot(budget, max_moves):
    sched, ledger = two_half_used_gpus()
    before = sched.state.gpu_free.copy(), sched.state.cpu_free.copy(), sorted(ledger.pods.values(), key=repr)
    assert make_room(sched, ledger, WHOLE, max_moves=max_moves, budget=budget) is None
    assert np.array_equal(sched.state.gpu_free, before[0]) and np.array_equal(sched.state.cpu_free, before[1])
    assert sorted(ledger.pods.values(), key=repr) == before[2]
    assert np.allclose(sched.frag.expected, Scheduler(sched.state, "gputide", MIX).frag.expected)


def test_plan_consolidation_frees_a_gpu_on_a_copy():
    sched, ledger = two_half_used_gpus()
    placed = list(ledger.pods.values())
    moves = plan_consolidation(sched.state, placed, MIX, max_moves=2)
    assert len(moves) == 1 and moves[0].expected_gpus_freed == 1.0
    assert sched.state.gpu_free[:, 0].tolist() == [500, 500]  # the input state is not touched


def test_fragmentation_metric_counts_idle_gpus_the_mix_cannot_use():
    sched, _ = two_half_used_gpus()
    only_whole = WorkloadMix.from_pods([WHOLE])
    metric = fragmentation_by_model(sched.state, only_whole)["T4"]
    assert metric == {"fragmentation_ratio": 1.0, "unallocatable_gpus": 1.0, "idle_gpus": 1.0}
    assert (
        fragmentation_by_model(sched.state, WorkloadMix.from_pods([HALF]))["T4"]["unallocatable_gpus"] == 0.0
    )


def test_aging_lets_an_old_low_priority_job_overtake():
    priority, submitted = np.array([5.0, 1.0]), np.array([10 * 3600.0, 0.0])
    assert queue_order(priority, submitted, now_s=10 * 3600.0).tolist() == [1, 0]  # 1 + 10 h > 5 + 0 h
    assert queue_order(priority, submitted, now_s=10 * 3600.0, aging_per_hour=0.1).tolist() == [0, 1]
    assert effective_priority([0.0], [0.0], 7200.0).tolist() == [2.0]


@pytest.mark.parametrize(
    ("need", "duration", "expected_start"),
    [
        ([8, 2], [3600, 1800], (1,)),  # ends at 1800 s, before the head's reservation at 3600 s
        ([8, 2], [3600, 7200], ()),  # would delay the head job: not backfilled
        ([8, 5], [3600, 600], ()),  # does not fit the 4 GPUs free now
        ([2, 8], [600, 600], (0,)),  # the head fits: it simply starts
    ],
    ids=["short job backfills", "long job waits", "too big for the hole", "head starts"],
)
def test_easy_backfill(need, duration, expected_start):
    decision = backfill(np.array(need), np.array(duration), np.array([0, 1]), free_now=4,
                        running_end_s=np.array([3600.0]), running_gpus=np.array([4.0]), now_s=0.0)  # fmt: skip
    assert decision.start == expected_start


def test_reservation_is_never_when_capacity_never_suffices():
    assert reservation_time(16, 4, np.array([100.0]), np.array([4.0]), 0.0)[0] == float("inf")


def test_wait_report_counts_jobs_over_four_hours():
    report = wait_report(np.array([0.0, 3600.0, 5 * 3600.0]), now_s=6 * 3600.0)
    assert (report.pending, report.longest_wait_s, report.over_4h) == (3, 6 * 3600.0, 2)
    assert report.as_gauges() == {"0h": 3, "4h": 2}
    assert wait_report(np.array([]), 0.0).pending == 0
