"""`plan_consolidation` on pods handed over node by node (`PodsByNode`): the moves of the list form, for the nodes
it looks at only, and it stops looking once its move budget is spent."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.plan.defrag import PodsByNode, plan_consolidation
from balancer.plan.placement import ClusterState, Placement, PodRequest, WorkloadMix


def scattered(nodes: int, seed: int) -> tuple[ClusterState, list[tuple[PodRequest, Placement]]]:
    """`nodes` nodes of 8 GPUs with shared-GPU pods on random GPUs (several to a GPU) to about 70 % of the GPUs."""
    rng = np.random.default_rng(seed)
    state = ClusterState.from_nodes([64000] * nodes, [512000] * nodes, [8] * nodes, ["A100"] * nodes)
    placed = []
    while (1000 - state.gpu_free).sum() < 0.7 * 1000 * 8 * nodes:
        milli = int(rng.choice([100, 250, 500, 750]))
        node, slot = int(rng.integers(nodes)), int(rng.integers(8))
        if state.gpu_free[node, slot] < milli:
            continue
        pod = PodRequest(cpu_milli=500, memory_mib=1024, num_gpu=1, gpu_milli=milli, name=f"pod-{len(placed)}")
        state.gpu_free[node, slot] -= milli
        state.cpu_free[node] -= pod.cpu_milli
        state.mem_free[node] -= pod.memory_mib
        placed.append((pod, Placement(node, (slot,), milli, pod.cpu_milli, pod.memory_mib)))
    return state, placed


def by_node(placed: list[tuple[PodRequest, Placement]], read: list[int] | None = None) -> PodsByNode:
    def on(node: int):
        if read is not None:
            read.append(node)
        return [(k, pod, where) for k, (pod, where) in enumerate(placed) if where.node == node]

    return PodsByNode(len(placed), on)


@pytest.mark.parametrize(("seed", "max_moves"), [(1, 1), (2, 4), (3, 12), (4, 30)])
def test_pods_by_node_give_the_moves_of_the_list(seed, max_moves):
    state, placed = scattered(40, seed)
    mix = WorkloadMix.from_pods([pod for pod, _ in placed])
    refuse = {f"pod-{i}" for i in range(0, len(placed), 7)}   # a budget that refuses some: rollbacks, skipped GPUs

    def budget(pod, source, target):
        return pod.name not in refuse

    listed = plan_consolidation(state, placed, mix, max_moves, budget=budget)
    assert listed
    if max_moves >= 12:   # a GPU emptied of several pods: their order (the ledger's) matters
        assert len({m.reason for m in listed}) < len(listed)
    assert plan_consolidation(state, by_node(placed), mix, max_moves, budget=budget) == listed


def test_it_reads_the_nodes_it_looks_at_and_stops_at_its_move_budget():
    state, placed = scattered(200, 5)
    read: list[int] = []
    moves = plan_consolidation(state, by_node(placed, read), WorkloadMix.from_pods([p for p, _ in placed]), 2)
    assert len(moves) == 2
    assert len(read) == len(set(read)) < 20   # each node read once, and few of the 200: not every partly used GPU's
