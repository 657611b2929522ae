"""Defragmentation keeps the scheduler's own rules: filters, NVLink domains, and moves that actually free GPUs."""

from __future__ import annotations

import numpy as np

from balancer.plan.defrag import Ledger, make_room
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
