"""A silent kubelet's kept answer is dropped only by a collection after one that already failed, and `grace_s` after
the first failed collection, not after the kubelet's last answer. The collection that first failed past `grace_s`
dropped the pods in the scrape that first said `gputide_pod_resources_up` 0: through Prometheus' remote write with
several shards the pods' stale markers could arrive before up 0 (up to `batch_send_deadline` apart), and the
controller, reading pod attribution with up 0, took the GPUs for free. Counted from the first failure, every
scraper that scrapes at least every `grace_s` (each Prometheus of an HA pair) gets a scrape with up 0 and the pods
before they go."""

from __future__ import annotations

import grpc
import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.collector import GpuCollector
from exporters.exposition import render
from exporters.podresources import Allocation, Attributed, PodAttribution

GPUS = tuple(GpuIdentity(str(i), f"GPU-{i}", f"0000:{i:02x}:00.0", f"nvidia{i}", "NVIDIA H100 80GB HBM3", "node-a")
             for i in range(2))
POD = ("ml", "train-0", "main", "nvidia.com/gpu", "GPU-0")


class Kubelet:
    """Answers `pods` ([(namespace, pod, container, resource, device id)]), or refuses while `silent`."""

    def __init__(self) -> None:
        self.pods, self.silent = [POD], False

    def list(self) -> list[Allocation]:
        if self.silent:
            raise grpc.RpcError("kubelet restarting")
        return [Allocation(*p) for p in self.pods]


class Backend:
    identity = GPUS

    def read(self) -> GpuReadings:
        return GpuReadings(identity=GPUS, values={"DCGM_FI_DEV_GPU_TEMP": np.full(2, 50.0)})


class Exporter:
    """The exporter's registry (the GPUs, then the attribution's health) over `kubelet`, scraped on a clock that
    each scrape moves on by `interval_s`."""

    def __init__(self, grace_s: float, interval_s: float) -> None:
        self.kubelet, self.now, self.interval_s = Kubelet(), 1000.0, interval_s
        att = PodAttribution(self.kubelet, grace_s=grace_s, clock=lambda: self.now)
        self.registry = CollectorRegistry()
        self.registry.register(GpuCollector(Attributed(Backend(), att)))
        self.registry.register(att)

    def scrape(self) -> tuple[set[str], float]:
        """(the pods of this scrape's join table, its gputide_pod_resources_up): one render, as a scrape is."""
        self.now += self.interval_s
        return self.collection()

    def collection(self) -> tuple[set[str], float]:
        """What `scrape` returns, of a collection made now (the clock not moved)."""
        fams = {f.name: f for f in text_string_to_metric_families(render(self.registry).decode())}
        return ({s.labels["pod"] for s in fams["gputide_gpu_workload_info"].samples},
                fams["gputide_pod_resources_up"].samples[0].value)


def test_the_first_scrape_past_grace_publishes_up_0_with_the_kept_pods_and_the_next_drops_them():
    exporter = Exporter(grace_s=60, interval_s=90)   # scrapes further apart than grace_s
    assert exporter.scrape() == ({"train-0"}, 1)
    exporter.kubelet.silent = True
    assert exporter.scrape() == ({"train-0"}, 0)   # past grace_s, but no scrape has said up 0 yet
    assert exporter.scrape() == (set(), 0)
    assert exporter.scrape() == (set(), 0)


def test_with_grace_0_the_pods_still_outlive_the_first_up_0_by_one_scrape():
    exporter = Exporter(grace_s=0, interval_s=15)
    assert exporter.scrape() == ({"train-0"}, 1)
    exporter.kubelet.silent = True
    assert exporter.scrape() == ({"train-0"}, 0)
    assert exporter.scrape() == (set(), 0)


def test_a_kubelet_that_answers_in_between_starts_the_count_again():
    """An answer between two silent scrapes publishes up 1 and its own pods; the next silence past grace_s keeps
    them for the scrape that says up 0 again: that scrape's up 0 is the first since the answer."""
    exporter = Exporter(grace_s=60, interval_s=90)
    exporter.scrape()
    exporter.kubelet.silent = True
    assert exporter.scrape() == ({"train-0"}, 0)
    exporter.kubelet.silent = False
    exporter.kubelet.pods = [POD, ("ml", "serve", "main", "nvidia.com/gpu", "GPU-1")]
    assert exporter.scrape() == ({"train-0", "serve"}, 1)   # answered: nothing dropped
    exporter.kubelet.silent = True
    assert exporter.scrape() == ({"train-0", "serve"}, 0)
    assert exporter.scrape() == (set(), 0)


def _went_down_first(seen: list[tuple[set[str], float]]) -> bool:
    """Whether one scraper's scrapes, in order, had up 0 with the pods in the one before the first without them."""
    gone = next(i for i, (pods, _) in enumerate(seen) if not pods)
    return gone > 0 and seen[gone - 1] == ({"train-0"}, 0) and all(up == 0 for _, up in seen[gone:])


def test_two_prometheus_replicas_each_get_up_0_with_the_pods_before_they_go():
    """An HA pair, each replica scraping every 30 s, 15 s apart (the exporter collects every 15 s), the kubelet
    falling silent after either one's scrape: each sees up 0 with the pods before it sees none (their scrapes are
    within grace_s, 60 s, of the first failed collection)."""
    for before in (4, 5):   # silent after replica A's scrape, then after B's
        exporter = Exporter(grace_s=60, interval_s=15)
        seen: tuple[list, list] = ([], [])
        for i in range(before + 10):
            exporter.kubelet.silent = i >= before
            seen[i % 2].append(exporter.scrape())
        assert all(s[:2] == [({"train-0"}, 1)] * 2 for s in seen)
        assert _went_down_first(seen[0]) and _went_down_first(seen[1]), (before, seen)


def test_a_replica_whose_last_scrape_shared_an_earlier_collection_still_gets_up_0_with_the_pods():
    """Replica B scrapes 5 s after A, each every 60 s (grace_s): B's scrape finds A's collection still running (a
    slow read) and shares it (`exporters.health`), so its up 1 and pods are from 5 s before it. Counted from the
    kubelet's last answer, B's next scrape, 60 s on, was 65 s past it: the pods went with B's first up 0."""
    exporter = Exporter(grace_s=60, interval_s=60)
    t = exporter.now
    assert exporter.collection() == ({"train-0"}, 1)   # A's scrape at t, which B's at t + 5 shares
    exporter.kubelet.silent = True
    exporter.now = t + 60
    assert exporter.collection() == ({"train-0"}, 0)   # A's: the first failed collection
    exporter.now = t + 65
    assert exporter.collection() == ({"train-0"}, 0)   # B's, 60 s after its last: 5 s past the first failure
    exporter.now = t + 120
    assert exporter.collection() == ({"train-0"}, 0)   # A's: 60 s past the first failure, not more
    exporter.now = t + 125
    assert exporter.collection() == (set(), 0)   # B's: it had up 0 with the pods at t + 65
