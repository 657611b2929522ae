"""A pod's instance rows win over its own whole-GPU row (`balancer.telemetry.attribution`): a whole-GPU row (no
GPU_I_ID) beside the pod's rows of MIG instances of the same GPU (dcgm-exporter's pod labels on a MIG GPU's own
series, an undeduplicated HA pair where one replica could not resolve the MIG device) made that pod a whole GPU's,
1,571 milli on an A100 split 4g + 3g. The instance's row wins for that pod on that GPU and each pod is one holder;
nothing else is trimmed (test_telemetry_attribution_busy_never_free.py: a pod known by a whole row alone keeps it)."""

from __future__ import annotations

import numpy as np
import pytest

from balancer.model import Workload, WorkloadClass
from balancer.telemetry.attribution import attributed

INDEX = {"GPU-0": 0, "GPU-1": 1}


def row(pod: str, uuid: str = "GPU-0", gi: str = "", value: float = 1.0) -> dict:
    labels = {"UUID": uuid, "namespace": "ml", "pod": pod, "workload_class": "batch"}
    labels |= {"GPU_I_ID": gi} if gi else {}
    return {"metric": labels, "value": [0, str(value)]}


def used(workloads: tuple[Workload, ...], placements: dict[str, tuple[int, ...]]) -> np.ndarray:
    """`ClusterSnapshot.gpu_milli_used`'s sum: each workload's share on each GPU it is placed on."""
    out = np.zeros(len(INDEX), dtype=np.int64)
    for w in workloads:
        np.add.at(out, np.asarray(placements[w.name], dtype=np.int64), w.gpu_milli)
    return out


BIG, SMALL = row("big", gi="1", value=4 / 7), row("small", gi="2", value=3 / 7)


@pytest.mark.parametrize(("rows", "expected"), [
    ([row("big"), BIG, row("small"), SMALL], {"big": 571, "small": 428}),
    ([BIG, row("big"), SMALL, row("small")], {"big": 571, "small": 428}),
    ([BIG, row("big"), SMALL], {"big": 571, "small": 428}),
    ([row("big"), BIG, BIG, row("big"), SMALL, row("small"), SMALL], {"big": 571, "small": 428}),
], ids=["dcgm-exporter: each pod on its instance and on the GPU's own series",
        "the same, whole rows after the instances'",
        "an HA pair: one replica named the instance, the other held the whole GPU",
        "both, twice over"])
def test_the_instance_row_wins_over_the_same_pods_whole_row(rows, expected):
    workloads, placements = attributed(rows, INDEX, {})
    assert {w.name.split("/")[1]: w.gpu_milli for w in workloads} == expected
    assert used(workloads, placements)[0] <= 1000
    assert all(p == (0,) for p in placements.values()) and all(w.gpus == 1 for w in workloads)


def test_an_api_workload_with_a_whole_row_beside_its_instance_holds_the_instance():
    api = Workload(name="ml/big", workload_class=WorkloadClass.INFERENCE, namespace="ml", owner="chat", gpus=1)
    workloads, placements = attributed([row("big"), BIG, row("small"), SMALL], INDEX, {"ml/big": api})
    assert {w.name: w.gpu_milli for w in workloads} == {"ml/big": 571, "ml/small": 428}
    assert used(workloads, placements)[0] == 999


def test_a_whole_row_on_another_gpu_stays_the_pods_placement_there():
    """Only the pod's whole row on the GPU where it has an instance is left out: on another GPU it is a placement."""
    workloads, placements = attributed([BIG, row("big", "GPU-1"), row("big")], INDEX, {})
    assert placements == {"ml/big": (0, 1)} and workloads[0].gpus == 2 and workloads[0].gpu_milli == 571
