"""A node whose kubelet PodResources API does not answer gputide's exporter (`gputide_pod_resources_up` 0): a minute
on, the exporter drops the node's `gputide_gpu_workload_info` rows while its GPU series stay fresh, so the GPUs read
idle (`gpu_milli_used` 0, spare): the capacity planner could lend them, migrations count them free. The snapshot
refuses them (`MissingTelemetry` naming the node and its GPUs), for the scope that owns the node only; an exporter
without the series (the simulator's, NVML without the kubelet, dcgm-exporter) is not down."""

from __future__ import annotations

import pytest
from test_telemetry_prometheus_unit import GPUS, NOW, FakeClient, source

from balancer.errors import MissingTelemetry


class KubeletDown(FakeClient):
    """FakeClient whose gputide exporter on `down` hosts says the kubelet did not answer: the query reading the pods
    `or` the join of their GPU temperature to `gputide_pod_resources_up == 0` answers those GPUs' temperature series
    too."""

    def __init__(self, down=(), **kw):
        super().__init__(**kw)
        self.down = set(down)

    def custom_query(self, promql):
        if promql.startswith("gputide_gpu_workload_info") and "gputide_pod_resources_up" in promql:
            return super().custom_query(promql) + [
                {"metric": {"__name__": "DCGM_FI_DEV_GPU_TEMP", "Hostname": host, "gpu": gpu, "UUID": uuid,
                            "instance": f"{host}:9835", "job": "gputide/gputide-exporter"}, "value": [NOW, "60"]}
                for host, gpu, uuid, _ in GPUS if host in self.down]
        return super().custom_query(promql)


# node-a's pods dropped by its exporter; node-b's pod attributed
PODS = [("GPU-b0", "ml", "train-0", "training")]


def test_the_gpus_of_a_node_whose_kubelet_does_not_answer_are_refused_never_read_idle():
    with pytest.raises(MissingTelemetry, match=r"PodResources API is not answering .* on 1 node\(s\) \(node-a;") as got:
        source(KubeletDown(down={"node-a"}, workloads=PODS)).snapshot()
    assert set(got.value.subjects) == {"GPU-a0", "GPU-a1"}
    assert "published without their pods" in str(got.value)
    # the simulator's exporter, NVML without --pod-resources-socket and dcgm-exporter publish no
    # gputide_pod_resources_up: the join answers nothing, as it does for an exporter whose kubelet answers
    assert dict(source(KubeletDown(workloads=PODS)).snapshot().placements) == {"ml/train-0": (2,)}


def test_only_the_shard_owning_the_node_holds():
    src = source(KubeletDown(down={"node-a"}, workloads=PODS))
    snap = src.snapshot_for(lambda name, _node: name == "node-b")
    assert dict(snap.placements) == {"ml/train-0": (2,)}
    with pytest.raises(MissingTelemetry, match="node-a"):
        src.snapshot_for(lambda name, _node: name == "node-a")

