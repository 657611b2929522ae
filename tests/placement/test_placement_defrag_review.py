"""Defragmentation keeps the scheduler's own rules: filters, NVLink domains, and moves that actually free GPUs."""

from __future__ import annotations

import numpy as np

from balancer.plan.defrag import Ledger, make_room, plan_consolidation
from balancer.plan.placement import Placement, PodRequest, Scheduler, WorkloadMix
from tests.placement.conftest import cluster


def _placed(state, pods_at):
    sched, ledger = Scheduler(state, "gputide", WorkloadMix.from_pods([p for p, _ in pods_at])), Ledger()
    for pod, where in pods_at:
        sched.commit(where, pod)
        ledger.add(pod, where)
    return sched, ledger


def test_make_room_never_places_a_pod_on_a_node_whose_taint_it_does_not_tolerate():
    whole = PodRequest(1000, 1000, 1, 1000, name="whole")
    half = PodRequest(1000, 1000, 1, 500, tolerations=1, name="half")
    state = cluster((8000, 8000, [1000], "T4"), (8000, 8000, [1000], "T4"))
    state.taints[0] = 1  # node 0: only pods tolerating taint bit 1
    sched, ledger = _placed(state, [(half, Placement(0, (0,), 500, 1000, 1000)),
                                    (half, Placement(1, (0,), 500, 1000, 1000))])
    before = sched.state.gpu_free.copy()
    done = make_room(sched, ledger, whole, max_moves=1)
    if done is not None:  # freeing node 1 is fine; node 0 is not
        assert done[0].node == 1
    else:
        assert np.array_equal(sched.state.gpu_free, before)


def test_make_room_keeps_a_multi_gpu_pod_in_one_nvlink_domain_when_one_fits():
    two = PodRequest(4000, 1000, 2, 1000, name="two")
    one = PodRequest(1000, 1000, 1, 1000, name="one")
    cpu = PodRequest(8000, 1000, name="cpu")
    state = cluster((8000, 64000, [1000] * 4, "A100"), (16000, 64000, [], None))
    state.nvlink_domain[0] = [0, 0, 1, 1]
    sched, ledger = _placed(state, [(one, Placement(0, (1,), 1000, 0, 0)), (cpu, Placement(0, (), 0, 8000, 1000))])
    assert sched.place(two) is None  # node 0's CPU is taken by the CPU-only pod
    placement, moves = make_room(sched, ledger, two, max_moves=1)
    assert placement.node == 0 and len(moves) == 1
    assert sorted(placement.slots) == [2, 3]  # domain 1 is wholly free; (0, 2) would span two domains


SMALL, MID = PodRequest(1000, 1000, 1, 100, name="small"), PodRequest(1000, 1000, 1, 300, name="mid")
HALF = PodRequest(1000, 1000, 1, 500, name="half")


def test_consolidation_moves_nothing_off_a_gpu_it_cannot_empty():
    big = PodRequest(1000, 1000, 1, 800, name="big")
    state = cluster((8000, 8000, [1000], "T4"), (8000, 8000, [1000], "T4"))
    placed = [(SMALL, Placement(0, (0,), 100, 1000, 1000)), (MID, Placement(0, (0,), 300, 1000, 1000)),
              (big, Placement(1, (0,), 800, 1000, 1000))]
    for _, where in placed:
        where.apply(state)
    # `small` fits next to `big`, `mid` fits nowhere else: GPU 0 of node 0 cannot be emptied
    assert plan_consolidation(state, placed, WorkloadMix.from_pods([SMALL, MID, big]), max_moves=4) == []


def test_consolidation_moves_nothing_when_the_budget_refuses_part_of_a_gpu():
    state = cluster((8000, 8000, [1000], "T4"), (8000, 8000, [1000], "T4"))
    placed = [(SMALL, Placement(0, (0,), 100, 1000, 1000)), (MID, Placement(0, (0,), 300, 1000, 1000)),
              (HALF, Placement(1, (0,), 500, 1000, 1000))]
    for _, where in placed:
        where.apply(state)
    moves = plan_consolidation(state, placed, WorkloadMix.from_pods([SMALL, MID, HALF]), max_moves=4,
                               budget=lambda pod, src, dst: pod.name != "mid")
    assert all(m.expected_gpus_freed > 0 for m in moves)
    assert not [m for m in moves if m.source.node == 0]  # node 0's GPU keeps `mid`: moving `small` frees nothing


def _in_use(state) -> int:
    return int((state.gpu_free[state.gpu_exists] < 1000).sum())


def test_consolidation_frees_gpus_net_and_moves_no_pod_back():
    a, b, c = (PodRequest(1000, 1000, 1, m, name=n) for m, n in ((100, "a"), (200, "b"), (950, "c")))
    state = cluster(*[(8000, 8000, [1000], "T4")] * 3)
    placed = [(a, Placement(0, (0,), 100, 1000, 1000)), (b, Placement(1, (0,), 200, 1000, 1000)),
              (c, Placement(2, (0,), 950, 1000, 1000))]
    for _, where in placed:
        where.apply(state)
    moves = plan_consolidation(state, placed, WorkloadMix.from_pods([a, b, c]), max_moves=4)
    after = state.copy()
    for m in moves:
        m.source.undo(after)
        m.target.apply(after)
    assert sum(m.expected_gpus_freed for m in moves) == _in_use(state) - _in_use(after) > 0
    assert len({m.pod.name for m in moves}) == len(moves)  # a: node 0 -> 1 -> 0 freed nothing for two restarts


def test_gpu_clustering_forgets_a_node_whose_shared_pods_left():
    """A rolled-back or migrated pod must not keep steering GpuClustering: its node is idle again."""
    half, quarter = PodRequest(1000, 1000, 1, 500), PodRequest(1000, 1000, 1, 250)
    sched = Scheduler(cluster((8000, 8000, [1000], "T4"), (8000, 8000, [1000], "T4")), "gpuclustering")
    fresh = sched.place(quarter)
    where = Placement(0, (0,), 500, 1000, 1000)
    sched.commit(where, half)
    sched.remove(where)
    assert sched.place(quarter) == fresh


def test_a_refused_make_room_leaves_gpu_clustering_as_it_was():
    half, whole = PodRequest(1000, 1000, 1, 500, name="half"), PodRequest(1000, 1000, 1, 1000, name="whole")
    sched, ledger = (Scheduler(cluster((8000, 8000, [1000], "T4"), (8000, 8000, [1000], "T4")), "gpuclustering"),
                     Ledger())
    for node in (0, 1):
        where = Placement(node, (0,), 500, 1000, 1000)
        sched.commit(where, half)
        ledger.add(half, where)
    before = sched.node_tag.copy()
    assert make_room(sched, ledger, whole, max_moves=1, budget=lambda pod, src, dst: False) is None
    assert sched.node_tag.tolist() == before.tolist()
