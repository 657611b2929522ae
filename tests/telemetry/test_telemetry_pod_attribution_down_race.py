"""The kubelet-down check and the pods are separate queries, each at its own evaluation time. An exporter scraped no
more often than it keeps the kubelet's last answer (60 s, e.g. Prometheus's default 1m scrape interval) drops a
node's pods in the same scrape that first reads `gputide_pod_resources_up` 0: landing between the check and the pods'
query, the snapshot held that node's GPUs with no pods, idle, as the check had read the kubelet up. The check is
asked again after the pods."""

from __future__ import annotations

import pytest
from test_telemetry_pod_attribution_down import PODS, KubeletDown
from test_telemetry_prometheus_unit import source

from balancer.errors import MissingTelemetry


class ScrapeBetween(KubeletDown):
    """node-a's kubelet stops answering, with its pod dropped, in a scrape that lands as the pods are read."""

    def custom_query(self, promql):
        if promql.startswith("gputide_gpu_workload_info"):
            self.down.add("node-a")   # the scrape that reads it down and drops its pods
        return super().custom_query(promql)


def test_a_scrape_that_drops_the_pods_between_the_check_and_the_pods_is_seen():
    with pytest.raises(MissingTelemetry, match=r"PodResources API is not answering .* \(node-a;") as got:
        source(ScrapeBetween(workloads=PODS)).snapshot()
    assert set(got.value.subjects) == {"GPU-a0", "GPU-a1"}
