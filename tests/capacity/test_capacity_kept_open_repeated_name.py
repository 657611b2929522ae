"""The GPUs of the node kept open (`claims`' `unlent`) are found by `node_index`, not a loop over every GPU (s35h4),
and a node name may repeat across clusters: every GPU of every node so named is unlent, as the loop over the GPUs
found them. `node_position` keeps a repeated name's first position only, and `node_index` maps all its GPUs to one
position: comparing with the first found none of them, lending the kept node's idle GPUs to training again."""

from __future__ import annotations

import numpy as np

from balancer.model import ClusterSnapshot, Gpu, Node
from balancer.plan.capacity_loop import claims

MODEL = "A100-SXM4-80GB"


def snapshot(names: list[str], per_node: int = 2) -> ClusterSnapshot:
    nodes = tuple(Node(name=n, gpu_model=MODEL, gpu_count=per_node, site=f"site-{i}") for i, n in enumerate(names))
    gpus = tuple(Gpu(index=i * per_node + s, uuid=f"GPU-{i}-{s}", node=n, slot=s, model=MODEL)
                 for i, n in enumerate(names) for s in range(per_node))
    k = len(gpus)
    return ClusterSnapshot(
        time=0.0, nodes=nodes, gpus=gpus, temperature_c=np.full(k, 50.0), memory_temperature_c=np.full(k, 55.0),
        slowdown_temp_c=np.full(k, 89.0), power_w=np.full(k, 200.0), power_limit_w=np.full(k, 400.0),
        sm_active=np.zeros(k), mem_used_mib=np.zeros(k), mem_total_mib=np.full(k, 81920.0),
        sm_clock_mhz=np.full(k, 1410.0), clock_event_reasons=np.zeros(k, dtype=np.int64), xid=np.zeros(k),
        sample_age_s=np.zeros(k))


def by_loop(snap: ClusterSnapshot, kept: str) -> set[int]:
    """The rule before, a loop over every GPU: the reference."""
    return {i for i, g in enumerate(snap.gpus) if g.node == kept}


def test_a_name_repeated_across_clusters_leaves_every_gpu_so_named_unlent():
    snap = snapshot(["gpu-a", "gpu-b", "gpu-a", "gpu-c"])
    assert claims((), snap, "gpu-a")["unlent"] == by_loop(snap, "gpu-a") == {0, 1, 4, 5}
    assert claims((), snap, "gpu-b")["unlent"] == by_loop(snap, "gpu-b") == {2, 3}


def test_same_as_the_loop_for_every_name_and_none():
    snap = snapshot(["x", "y", "x", "x", "z", "y"])
    for kept in ("x", "y", "z", "gone"):
        assert claims((), snap, kept)["unlent"] == by_loop(snap, kept), kept
    assert claims((), snap, None)["unlent"] == set()
    assert claims((), None, "x")["unlent"] == set()
    assert claims((), snapshot([]), "x")["unlent"] == set()
