"""A pod the Kubernetes API knows (`overrides`) keeps the API's description, but not a whole GPU it does not hold:
the API says `gpu_milli` 1000 for any pod without a `gputide.io/gpu-milli` annotation, so time-sliced pods
(`nvidia.com/gpu` replicas) and MIG devices handed out as `nvidia.com/gpu` (MIG strategy "single") counted as a
whole GPU each: seven 1g.10gb pods were 7,000 milli-GPUs on one A100, and a move needed a whole free GPU per pod."""

from __future__ import annotations

import pytest

from balancer.model import Workload, WorkloadClass
from balancer.telemetry.attribution import attributed

INDEX = {"GPU-0": 0, "GPU-1": 1}


def row(pod: str, uuid: str = "GPU-0", gi: str = "", value: float = 1.0) -> dict:
    labels = ({"UUID": uuid, "namespace": "ml", "pod": pod, "workload_class": "unknown"}
              | ({"GPU_I_ID": gi} if gi else {}))
    return {"metric": labels, "value": [0, str(value)]}


def api(pod: str, milli: int = 1000) -> Workload:
    return Workload(name=f"ml/{pod}", workload_class=WorkloadClass.INFERENCE, namespace="ml", owner="chat",
                    gpus=1, gpu_milli=milli)


@pytest.mark.parametrize(("rows", "overrides", "expected"), [
    ([row("a"), row("b")], [api("a"), api("b")], {"a": 500, "b": 500}),
    ([row(f"p{i}", gi=str(7 + i), value=1 / 7) for i in range(7)], [api(f"p{i}") for i in range(7)],
     {f"p{i}": 142 for i in range(7)}),
    ([row("a"), row("b")], [api("a", 300), api("b")], {"a": 300, "b": 500}),
    ([row("a", "GPU-1")], [api("a", 250)], {"a": 250}),
    ([row("a", "GPU-1")], [api("a")], {"a": 1000}),
], ids=["time-sliced: half a GPU each, not a whole one", "MIG strategy single: a seventh each",
        "an annotated share is the pod's own", "an annotated share alone on a GPU", "an exclusive GPU: all of it"])
def test_an_api_workload_holds_no_more_of_a_gpu_than_its_slot(rows, overrides, expected):
    workloads, _ = attributed(rows, INDEX, {w.name: w for w in overrides})
    assert {w.name.split("/")[1]: w.gpu_milli for w in workloads} == expected
    assert all(w.owner == "chat" and w.workload_class is WorkloadClass.INFERENCE for w in workloads)
