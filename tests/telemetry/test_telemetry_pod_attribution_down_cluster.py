"""A node whose kubelet does not answer is named by its `gputide_pod_resources_up` series' `Hostname` *and*
`cluster`: host names are unique within a cluster only. Without --cluster, a Prometheus may see another cluster's
`gputide_*` series before its GPU series (a cluster being onboarded: its exporters sent, its recording rules not yet
loaded), so `_one_cluster` sees one cluster while that one's `node-a` is down; matched by host name alone, it refused
this cluster's healthy `node-a` (the snapshot) and counted its free GPUs busy (the scheduler's facts). A series
without `cluster` names a node of GPU series without one."""

from __future__ import annotations

import pytest
from test_telemetry_pod_attribution_down import PODS
from test_telemetry_prometheus_unit import GPUS, NOW, FakeClient, source

from balancer.errors import MissingTelemetry


class Clusters(FakeClient):
    """FakeClient whose series carry `cluster` (None: no such label) and whose queries reading the pods also answer
    `gputide_pod_resources_up` 0 for `down`, (cluster or None, Hostname) pairs; answers the scheduler's headroom and
    pod count queries as Prometheus would."""

    def __init__(self, cluster=None, down=(), **kw):
        super().__init__(workloads=PODS, **kw)
        self.cluster, self.down = cluster, list(down)

    def custom_query(self, promql):
        if promql.startswith("gpu:temperature_headroom:celsius"):
            rows = [{"metric": {"__name__": "gpu:temperature_headroom:celsius", "hostname": host, "gpu": gpu,
                                "UUID": uuid}, "value": [NOW, "20"]} for host, gpu, uuid, _ in GPUS]
        elif promql.startswith("count by (UUID)"):
            rows = [{"metric": {"UUID": u}, "value": [NOW, "1"]} for u, *_ in self.workloads]
        else:
            rows = super().custom_query(promql)
        if self.cluster is not None:
            rows = [{"metric": {**r["metric"], "cluster": self.cluster}, "value": r["value"]} for r in rows]
        if "gputide_pod_resources_up" in promql:
            rows += [{"metric": {"__name__": "gputide_pod_resources_up", "Hostname": host, "job": "gputide/exporter",
                                 "instance": "10.0.0.9:9835", **({} if c is None else {"cluster": c})},
                      "value": [NOW, "0"]} for c, host in self.down]
        return rows


CASES = [(None, "west", False), ("east", "west", False), ("east", None, False),
         (None, None, True), ("east", "east", True)]
IDS = ["another cluster's node of that name", "another named cluster's", "a down series without cluster",
       "no cluster labels at all", "this cluster's own"]


@pytest.mark.parametrize(("cluster", "down_in", "refused"), CASES, ids=IDS)
def test_a_down_node_refuses_the_gpus_of_its_own_cluster_only(cluster, down_in, refused):
    src = source(Clusters(cluster, down=[(down_in, "node-a")]))
    if refused:
        with pytest.raises(MissingTelemetry, match=r"not answering .* on 1 node\(s\) \(node-a;") as got:
            src.snapshot()
        assert set(got.value.subjects) == {"GPU-a0", "GPU-a1"}
    else:
        assert dict(src.snapshot().placements) == {"ml/train-0": (2,)}


@pytest.mark.parametrize(("cluster", "down_in", "refused"), CASES, ids=IDS)
def test_the_scheduler_counts_busy_the_gpus_of_a_down_node_of_its_own_cluster_only(cluster, down_in, refused):
    facts = source(Clusters(cluster, down=[(down_in, "node-a")])).gpu_facts()
    assert facts["node-a"].busy == ({0, 1} if refused else set())
    assert facts["node-b"].busy == {0}   # its pod
