"""The Scheduler's incremental caches equal a rebuild from scratch, and its fast paths pick what the slow ones do.

NodeStats refreshes one node in plain Python and FragCache reads a shared-GPU pod's effect from a table; the
replay's speed rests on both, and its decisions on their being exact, so random binds and unbinds are checked
against fresh caches built on the resulting state.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.plan.placement import FragCache, PodRequest, Scheduler, WorkloadMix
from balancer.plan.placement.nodestats import NodeClasses, NodeStats
from tests.placement.conftest import cluster

PODS = [PodRequest(2000, 4000, 1, 250), PodRequest(4000, 8000, 1, 500), PodRequest(8000, 8000, 2, 1000),
        PodRequest(1000, 1000), PodRequest(4000, 4000, 1, 1000, ("A100",))]  # fmt: skip
MIX = WorkloadMix.from_pods(PODS, include_cpu_only=False)

node_st = st.tuples(
    st.integers(4000, 32000),
    st.lists(st.sampled_from([0, 250, 500, 750, 1000]), max_size=4),
    st.sampled_from(["T4", "A100"]),
    st.lists(st.integers(0, 2), min_size=4, max_size=4),
)


def _state(nodes):
    state = cluster(*[(c, 2 * c, g, model if g else None) for c, g, model, _ in nodes])
    width = state.gpu_free.shape[1]
    state.nvlink_domain[:] = np.array([dom[:width] for *_, dom in nodes])
    return state


@settings(max_examples=40, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=5), st.lists(st.integers(0, len(PODS) - 1), max_size=30))
def test_refreshed_caches_equal_fresh_ones(nodes, arrivals):
    sched = Scheduler(_state(nodes), "gputide", MIX, rng=np.random.default_rng(0))
    placed = []
    for k, i in enumerate(arrivals):
        if k % 4 == 3 and placed:
            sched.remove(placed.pop(0))
        elif (where := sched.schedule(PODS[i])) is not None:
            placed.append(where)
    s, fresh, frag = sched.state, NodeStats(sched.state), FragCache(sched.state, MIX)
    for name in ("idle", "busy", "domain_busy", "full_in_domain", "rep_slot", "rep_free"):
        assert np.array_equal(getattr(sched.stats, name), getattr(fresh, name)), name
    for name in ("count", "below", "total", "frag"):
        assert np.array_equal(getattr(sched.frag, name), getattr(frag, name)), name
    ids = sched.frag.classes.id
    same_state = [(int(s.model[n]), int(s.cpu_free[n]), int(s.mem_free[n]), tuple(sorted(s.gpu_free[n])))
                  for n in range(s.n_nodes)]  # fmt: skip
    for a in range(s.n_nodes):
        for b in range(s.n_nodes):
            assert (ids[a] == ids[b]) == (same_state[a] == same_state[b])
    for pod in PODS:
        nodes_ok = sched.feasible_nodes(pod)
        if pod.num_gpu != 1 or not len(nodes_ok):
            continue
        rows, slot = np.nonzero(s.gpu_free[nodes_ok] >= pod.gpu_milli)
        node = nodes_ok[rows]
        slow = sched._distinct(node, slot, s.gpu_free[node, slot].astype(np.int64))
        fast = sched.stats.slot_candidates(nodes_ok, pod.gpu_milli)
        assert all(np.array_equal(a, b) for a, b in zip(slow, fast, strict=True))


def test_node_classes_reuse_ids_below_the_node_count():
    state = cluster(*[(8000, 8000, [1000, 1000], "T4")] * 3)
    classes = NodeClasses(state)
    assert classes.id.tolist() == [0, 0, 0]
    for _ in range(10):
        for node in range(3):
            state.assign(node, (0,), 50, 100, 0)
            classes.refresh(node)
    assert classes.id.max() < state.n_nodes
    first, group = classes.groups(np.array([0, 1, 2, 0]), np.array([900, 900, 1000, 1000]))
    assert len(first) == 2 and group.tolist() == [0, 0, 1, 1]
