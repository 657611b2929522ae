"""The Scheduler's incremental caches equal a rebuild from scratch, and its fast paths pick what the slow ones do.

NodeStats refreshes one node in plain Python and FragCache reads a shared-GPU pod's effect from a table; the
replay's speed rests on both, and its decisions on their being exact, so random binds and unbinds are checked
against fresh caches built on the resulting state.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from balancer.plan.placement import FragCache, PodRequest, Scheduler, WorkloadMix, node_fragmentation
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


def _stats_by_broadcast(s):
    """NodeStats' per-node aggregates as first written: every slot against every other, [n, g, g]."""
    g = s.gpu_free.shape[1]
    same = (s.nvlink_domain[:, :, None] == s.nvlink_domain[:, None, :]) & s.gpu_exists[:, None, :]
    busy = s.gpu_exists & (s.gpu_free < 1000)
    domain_of = (s.nvlink_domain[:, :, None] == np.arange(g)) & s.gpu_exists[:, :, None]
    return {"domain_size": same.sum(axis=2), "domain_busy": (same & busy[:, None, :]).sum(axis=2),
            "full_in_domain": (domain_of & (s.gpu_free >= 1000)[:, :, None]).sum(axis=1).max(axis=1)}


@settings(max_examples=40, deadline=None)
@given(st.lists(node_st, min_size=1, max_size=6), st.lists(st.integers(0, len(PODS) - 1), max_size=12),
       st.integers(-1, 5))
def test_caches_built_for_all_nodes_at_once_equal_the_node_by_node_and_broadcast_ones(nodes, arrivals, odd_domain):
    """NodeClasses, NodeStats and FragCache build every node at once (one sort, bincounts per NVLink domain,
    FGD's statistics once per class); each equals what it replaces: node-by-node refreshes, the [n, g, g]
    broadcast, `node_fragmentation` of every node. Domain ids outside 0..g-1 take the broadcast path."""
    sched = Scheduler(_state(nodes), "gputide", MIX)
    for i in arrivals:   # nodes in different states, several in the same one
        sched.schedule(PODS[i])
    s = sched.state
    if odd_domain >= 0:   # a free GPU in a domain numbered past the slots
        node, slot = (np.argwhere(s.gpu_free >= 1000).tolist() or [[0, 0]])[0]
        s.nvlink_domain[node, slot] = s.gpu_free.shape[1] + odd_domain
    stats, classes, frag = NodeStats(s), NodeClasses(s), FragCache(s, MIX)
    for name, want in _stats_by_broadcast(s).items():
        assert np.array_equal(getattr(stats, name), want), name
    one_by_one = NodeClasses.__new__(NodeClasses)
    one_by_one.state, one_by_one.id, one_by_one._ids = s, np.zeros(s.n_nodes, dtype=np.int64), {}
    one_by_one._refs, one_by_one._keys = np.zeros(s.n_nodes, dtype=np.int64), [None] * s.n_nodes
    one_by_one._spare = list(range(s.n_nodes - 1, -1, -1))
    for node in range(s.n_nodes):
        one_by_one.refresh(node)
    assert classes.id.tolist() == one_by_one.id.tolist() and classes._ids == one_by_one._ids
    assert classes._keys == one_by_one._keys and classes._spare == one_by_one._spare
    assert classes._refs.tolist() == one_by_one._refs.tolist()
    want = node_fragmentation(s.gpu_free, s.cpu_free, s.mem_free, MIX.model_ok(s), MIX)
    assert np.array_equal(frag.frag, want) and frag.frag.dtype == want.dtype
    assert np.array_equal(frag.expected, want @ MIX.weight)
