"""`plan_consolidation`'s moves, judged as one plan: each pod moves at most once (a GPU this plan filled is not
emptied again: the second move would be planned from a state the first one's target already used, and the guard
refuses a second action on the same workload, leaving the GPU half emptied), and no GPU model's fragmentation (the
metric consolidation is run to lower) is worse after the moves than before."""

from __future__ import annotations

from collections import Counter

import numpy as np
import pytest

from balancer.plan.defrag import fragmentation_by_model, plan_consolidation
from balancer.plan.placement import ClusterState, Placement, PodRequest, WorkloadMix


def scattered(nodes: int, seed: int, cpu: int = 64000, models: tuple[str, ...] = ("A100",)):
    """`nodes` nodes of 8 GPUs with shared and whole-GPU pods of a few CPU sizes on random GPUs."""
    rng = np.random.default_rng(seed)
    node_models = [models[i % len(models)] for i in range(nodes)]
    state = ClusterState.from_nodes([cpu] * nodes, [512000] * nodes, [8] * nodes, node_models)
    placed = []
    for _ in range(400):
        milli, c = int(rng.choice([100, 250, 500, 750, 1000])), int(rng.choice([500, 4000, 8000]))
        node, slot = int(rng.integers(nodes)), int(rng.integers(8))
        if state.gpu_free[node, slot] < milli or state.cpu_free[node] < c:
            continue
        pod = PodRequest(cpu_milli=c, memory_mib=1024, num_gpu=1, gpu_milli=milli, name=f"pod-{len(placed)}")
        Placement(node, (slot,), milli, c, 1024).apply(state)
        placed.append((pod, Placement(node, (slot,), milli, c, 1024)))
    return state, placed


def mix_of(placed):
    whole = PodRequest(cpu_milli=4000, memory_mib=1024, num_gpu=1, gpu_milli=1000)
    return WorkloadMix.from_pods([p for p, _ in placed] + [whole] * 5)


def after(state: ClusterState, moves) -> ClusterState:
    out = state.copy()
    for m in moves:
        m.source.undo(out)
        m.target.apply(out)
    return out


@pytest.mark.parametrize("seed", [46, *range(30, 46)])
def test_a_pod_moves_at_most_once_and_no_gpu_filled_is_emptied_again(seed):
    state, placed = scattered(6, seed)
    moves = plan_consolidation(state, placed, mix_of(placed), 12)
    twice = [name for name, n in Counter(m.pod.name for m in moves).items() if n > 1]
    assert not twice, f"moved twice in one plan: {twice}"
    filled = {(m.target.node, j) for m in moves for j in m.target.slots}
    emptied = {(m.source.node, j) for m in moves for j in m.source.slots}
    assert not filled & emptied, "a GPU the plan filled is emptied by the same plan"
    after(state, moves)   # the moves, applied in order, fit (assign refuses to over-commit)


@pytest.mark.parametrize("seed", [187, 219, *range(0, 40)])
@pytest.mark.parametrize("max_moves", [1, 4])
def test_no_model_is_more_fragmented_after_the_moves(seed, max_moves):
    state, placed = scattered(4, seed, cpu=40000, models=("A100", "H100"))
    mix = mix_of(placed)
    moves = plan_consolidation(state, placed, mix, max_moves)
    before, now = fragmentation_by_model(state, mix), fragmentation_by_model(after(state, moves), mix)
    for model, f in before.items():
        assert now[model]["unallocatable_gpus"] <= f["unallocatable_gpus"] + 1e-9, (model, moves)
