"""Small hand-built clusters shared by the placement tests."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from balancer.plan.placement import ClusterState

DATA = Path(__file__).resolve().parents[1] / "data" / "alibaba-gpu-v2023"


def shared_data() -> Path:
    root = Path(__file__).resolve().parents[2]
    return Path(os.environ.get("GPUTIDE_SHARED_DATA", root.parent / "shared" / "data"))


def cluster(*nodes: tuple[int, int, list[int], str | None]) -> ClusterState:
    """nodes: (cpu_milli, memory_mib, per-GPU free milli, model)."""
    width = max([len(n[2]) for n in nodes] + [1])
    state = ClusterState.from_nodes(
        [n[0] for n in nodes], [n[1] for n in nodes], [len(n[2]) for n in nodes], [n[3] for n in nodes]
    )
    for i, n in enumerate(nodes):
        for j, free in enumerate(n[2]):
            state.gpu_free[i, j] = free
    assert state.gpu_free.shape[1] == width
    return state


@pytest.fixture
def slice_paths() -> tuple[Path, Path]:
    return DATA / "openb_node_list_gpu_node_slice.csv", DATA / "openb_pod_list_default_slice.csv"
