"""Kubelets list a finished (Succeeded or Failed) pod's devices until the pod object is gone (kubernetes#119423),
and `List` gives no phase, UID or start time: a completed Job pod kept its GPU in the join table, and once the device
plugin gave the GPU to a new pod, both pods held it. Of the pods claiming one device ID, the one the exporter saw
appear last now holds it; pods that appeared together (the exporter's first answer) cannot be told apart and all
keep it, counted as contested."""

from __future__ import annotations

import numpy as np
import pytest
from prometheus_client import CollectorRegistry

from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.collector import GpuCollector
from exporters.podresources import Allocation, Attributed, PodAttribution

GPUS = tuple(GpuIdentity(str(i), f"GPU-{i}", f"0000:{i:02x}:00.0", f"nvidia{i}", "NVIDIA H100 80GB HBM3", "node-a")
             for i in range(2))
GPU, SHARED = "nvidia.com/gpu", "nvidia.com/gpu.shared"


class Kubelet:
    """Answers `pods`: [(namespace, pod, container, resource, device id)]."""

    def __init__(self) -> None:
        self.pods: list[tuple[str, str, str, str, str]] = []

    def list(self) -> list[Allocation]:
        return [Allocation(*p) for p in self.pods]


class Backend:
    identity = GPUS

    def read(self) -> GpuReadings:
        return GpuReadings(identity=GPUS, values={"DCGM_FI_DEV_GPU_TEMP": np.full(2, 50.0)})


def scrapes(answers: list[list[tuple[str, str, str, str, str]]]) -> tuple[set[tuple[str, str]], float, float]:
    """The join table's (UUID, pod) rows, superseded claims and contested devices after the kubelet gave
    `answers`, one per scrape, ten seconds apart."""
    kubelet, now = Kubelet(), [1000.0]
    att = PodAttribution(kubelet, clock=lambda: now[0])
    reg = CollectorRegistry()
    reg.register(GpuCollector(Attributed(Backend(), att)))
    reg.register(att)
    for answer in answers:
        kubelet.pods = answer
        rows = {(s.labels["UUID"], s.labels["pod"]) for m in reg.collect() if m.name == "gputide_gpu_workload_info"
                for s in m.samples}
        now[0] += 10
    return (rows, reg.get_sample_value("gputide_pod_resources_superseded_claims"),
            reg.get_sample_value("gputide_pod_resources_contested_devices"))


JOB_0 = ("ml", "job-0", "main", GPU, "GPU-0")   # finished, still listed
JOB_1 = ("ml", "job-1", "main", GPU, "GPU-0")   # got job-0's GPU afterwards
OTHER = ("ml", "serve", "main", GPU, "GPU-1")

CASES = [
    ("a finished pod's GPU given to a new pod is the new pod's alone",
     [[JOB_0, OTHER], [JOB_0, JOB_1, OTHER]], {("GPU-0", "job-1"), ("GPU-1", "serve")}, 1, 0),
    ("the new pod keeps it while the finished one is listed, scrape after scrape",
     [[JOB_0], [JOB_0, JOB_1], [JOB_0, JOB_1], [JOB_1, JOB_0]], {("GPU-0", "job-1")}, 1, 0),
    ("a time-sliced replica is a device of its own: the finished pod's replica goes to the newer pod",
     [[("ml", "a", "main", SHARED, "GPU-0::1"), ("ml", "b", "main", SHARED, "GPU-0::2")],
      [("ml", "a", "main", SHARED, "GPU-0::1"), ("ml", "b", "main", SHARED, "GPU-0::2"),
       ("ml", "c", "main", SHARED, "GPU-0::1")]],
     {("GPU-0", "b"), ("GPU-0", "c")}, 1, 0),
    ("pods that appeared together cannot be told apart: both keep the GPU, counted as contested",
     [[JOB_0, JOB_1, OTHER]], {("GPU-0", "job-0"), ("GPU-0", "job-1"), ("GPU-1", "serve")}, 0, 1),
    ("the newest of three claimants holds the device",
     [[JOB_0], [JOB_0, JOB_1], [JOB_0, JOB_1, ("ml", "job-2", "main", GPU, "GPU-0")]], {("GPU-0", "job-2")}, 2, 0),
]


@pytest.mark.parametrize(("answers", "rows", "superseded", "contested"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_of_the_pods_claiming_one_device_the_last_to_appear_holds_it(answers, rows, superseded, contested):
    assert scrapes(answers) == (rows, superseded, contested)


def test_an_init_container_and_the_main_one_sharing_a_device_is_no_contest():
    init = ("ml", "job-0", "init", GPU, "GPU-0")
    assert scrapes([[OTHER], [init, JOB_0, OTHER]]) == ({("GPU-0", "job-0"), ("GPU-1", "serve")}, 0, 0)
