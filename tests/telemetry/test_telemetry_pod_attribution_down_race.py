"""An exporter scraped no more often than it keeps the kubelet's last answer (60 s, e.g. Prometheus's default 1m
scrape interval) drops a node's pods in the same scrape that first reads `gputide_pod_resources_up` 0. Wherever that
scrape lands among the queries a snapshot asks, the snapshot either refuses the node or reads its pods: never its
GPUs with no pods and the kubelet read up (idle). The kubelet's state is read in the query that reads the pods, at
one instant over one view, so no scrape of a Prometheus scraping the exporter lands between them (through remote
write with several shards, the two may land up to batch_send_deadline apart: `PrometheusTelemetrySource._workloads`);
asked apart (before the pods, and again after them, as 35265dac did) it cost two more queries a snapshot, each
reading every GPU's temperature and record series."""

from __future__ import annotations

import pytest
from test_telemetry_pod_attribution_down import PODS, KubeletDown
from test_telemetry_prometheus_unit import source

from balancer.errors import MissingTelemetry

A_POD = ("GPU-a0", "ml", "a-0", "training")


class ScrapeAt(KubeletDown):
    """node-a's kubelet stops answering, with its pod dropped, in a scrape that lands just before the snapshot's
    query number `at` (None: never); `asked` keeps the queries."""

    def __init__(self, at=None):
        super().__init__(workloads=[A_POD, *PODS])
        self.at, self.asked = at, []

    def custom_query(self, promql):
        if len(self.asked) == self.at:   # the scrape that reads it down and drops its pods
            self.down.add("node-a")
            self.workloads = PODS
        self.asked.append(promql)
        return super().custom_query(promql)


def _asked() -> list[str]:
    client = ScrapeAt()
    source(client).snapshot()
    return client.asked


@pytest.mark.parametrize("at", range(len(_asked()) + 1))
def test_a_scrape_that_drops_the_pods_is_seen_wherever_it_lands(at):
    try:
        snap = source(ScrapeAt(at)).snapshot()
    except MissingTelemetry as refused:
        assert "(node-a;" in str(refused) and set(refused.subjects) == {"GPU-a0", "GPU-a1"}
    else:   # landed after the pods were read: they are the node's pods as they were
        assert dict(snap.placements) == {"ml/a-0": (0,), "ml/train-0": (2,)}


def test_the_kubelet_is_read_in_the_query_that_reads_the_pods_and_in_no_other():
    reads = [q for q in _asked() if "gputide_pod_resources_up" in q]
    assert len(reads) == 1 and "gputide_gpu_workload_info" in reads[0], reads
