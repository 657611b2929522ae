"""A pod that ran to its end holds no GPU, whatever the exporter says. Kubelets before 1.34 still list a finished
(Succeeded or Failed) pod's devices in PodResources (kubernetes#119423, fixed by #132028), so the exporter's join
table keeps a completed Job's pod on its GPU for as long as the pod object stays: the GPU looked busy (consolidation
could not free it, a pod sharing it was billed half), and a finished pod could be picked to move off a hot GPU."""

from __future__ import annotations

from balancer.model import Workload, WorkloadClass
from balancer.telemetry.attribution import attributed

INDEX = {"GPU-0": 0, "GPU-1": 1}


def row(pod: str, uuid: str = "GPU-0", ns: str = "ml") -> dict:
    return {"metric": {"UUID": uuid, "namespace": ns, "pod": pod, "workload_class": "unknown"}, "value": [0, "1"]}


def test_a_finished_pod_attributed_by_the_kubelet_holds_no_gpu_and_takes_no_share():
    running = {"ml/serve-0": Workload(name="ml/serve-0", workload_class=WorkloadClass.INFERENCE, namespace="ml", owner="serve")}
    rows = [row("serve-0"), row("job-done"), row("job-failed", uuid="GPU-1")]
    workloads, placements = attributed(rows, INDEX, running, finished=frozenset({"ml/job-done", "ml/job-failed"}))
    assert [(w.name, w.gpu_milli) for w in workloads] == [("ml/serve-0", 1000)]   # the whole GPU, not half
    assert placements == {"ml/serve-0": (0,)}


def test_without_the_finished_pods_every_attributed_pod_holds_its_gpu_as_before():
    workloads, placements = attributed([row("serve-0"), row("other")], INDEX, {})
    assert [(w.name, w.gpu_milli) for w in workloads] == [("ml/serve-0", 500), ("ml/other", 500)]
    assert placements == {"ml/serve-0": (0,), "ml/other": (0,)}
