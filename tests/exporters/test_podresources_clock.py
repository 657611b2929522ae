"""The clock a silent kubelet's `grace_s` is counted on: when each collection began, before its GPU reads
(`Attributed.read`). Read after them, each collection's time was shifted by how long its GPU reads took (up to the
per-GPU deadline, seconds), so a scraper scraping exactly every `grace_s` whose scrape read a slow GPU was more
than `grace_s` past the first failed collection and went from up 1 with the pods to up 0 without them. And how old
the kept answer may be: one over 2 x `grace_s` old when the first failed collection began (no collection for that
long) goes at the next failed collection, not `grace_s` later."""

from __future__ import annotations

import time

import numpy as np
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.base import GpuReadings
from exporters.collector import GpuCollector
from exporters.exposition import render
from exporters.podresources import Attributed, PodAttribution
from tests.exporters.test_podresources_up_before_drop import GPUS, Kubelet


class Node:
    """An exporter over a kubelet (`Kubelet`) whose GPU reads take `read_s` on the clock it reads, `now`."""

    def __init__(self, grace_s: float) -> None:
        self.kubelet, self.now, self.read_s = Kubelet(), 1000.0, 0.1
        att = PodAttribution(self.kubelet, grace_s=grace_s, clock=lambda: self.now)
        self.registry = CollectorRegistry()
        self.registry.register(GpuCollector(Attributed(self, att)))
        self.registry.register(att)

    @property
    def identity(self) -> tuple:
        return GPUS

    def read(self) -> GpuReadings:
        self.now += self.read_s
        return GpuReadings(identity=GPUS, values={"DCGM_FI_DEV_GPU_TEMP": np.full(2, 50.0)})

    def collection(self, at: float, read_s: float = 0.1) -> tuple[set[str], float]:
        """(the pods, gputide_pod_resources_up) of a collection begun at `at` whose GPU reads take `read_s`."""
        self.now, self.read_s = at, read_s
        fams = {f.name: f for f in text_string_to_metric_families(render(self.registry).decode())}
        return ({s.labels["pod"] for s in fams["gputide_gpu_workload_info"].samples},
                fams["gputide_pod_resources_up"].samples[0].value)


def test_a_slow_gpu_read_at_the_boundary_does_not_cost_a_scraper_its_up_0_with_the_pods():
    """Scraper S every 60 s (grace_s); scraper A's collection, the first to fail, begins 0.2 s after S's last good
    one; S's next, 60 s after its last, reads a GPU until its 3 s deadline: 59.8 s past the first failure as the
    collections began, 62.7 s as the GPU reads ended."""
    node = Node(grace_s=60)
    assert node.collection(0.0) == ({"train-0"}, 1)   # S
    node.kubelet.silent = True
    for t in (0.2, 15.2, 30.2, 45.2):
        assert node.collection(t) == ({"train-0"}, 0)   # A's; 0.2: the first failed collection
    assert node.collection(60.0, read_s=3.0) == ({"train-0"}, 0)   # S's first up 0: the pods with it
    assert node.collection(60.2) == ({"train-0"}, 0)   # A's: grace_s after the first failure, not past it
    assert node.collection(75.2) == (set(), 0)   # A's: past it
    assert node.collection(120.0, read_s=3.0) == (set(), 0)   # S's


def test_an_answer_over_twice_grace_s_old_at_the_first_failure_goes_at_the_next_failed_collection():
    """No collection for an hour (Prometheus away), then the kubelet silent: the first failed collection still says
    up 0 with the kept pods, the next drops them rather than bill them (`gpu_pod:attribution:share`) for grace_s
    more; an answer exactly 2 x grace_s old keeps its grace."""
    away = Node(grace_s=60)
    assert away.collection(0.0) == ({"train-0"}, 1)
    away.kubelet.silent = True
    assert away.collection(3600.0) == ({"train-0"}, 0)   # the first failed collection: never the one that drops
    assert away.collection(3615.0) == (set(), 0)
    assert away.collection(3630.0) == (set(), 0)
    recent = Node(grace_s=60)
    assert recent.collection(0.0, read_s=0.0) == ({"train-0"}, 1)   # answered at 0.0
    recent.kubelet.silent = True
    for t in (120.0, 150.0, 180.0):   # 120: 2 x grace_s after the answer, not more
        assert recent.collection(t) == ({"train-0"}, 0)
    assert recent.collection(195.0) == (set(), 0)


def test_a_wall_clock_stepped_forward_before_the_first_failure_moves_no_grace():
    """`grace_s` is timed on a monotonic clock (`clock`), the published last success on the wall clock (`wall`).
    Timed on the wall clock, an NTP step forward of over 2 x `grace_s` before the first failed collection made the
    kept answer look that old (`_stale_kept`): the next collection dropped the pods, and an HA partner scraping every
    `grace_s` got its first up 0 without them."""
    kubelet, mono, wall = Kubelet(), [0.0], [1_000_000.0]
    att = PodAttribution(kubelet, grace_s=60, clock=lambda: mono[0], wall=lambda: wall[0])
    registry = CollectorRegistry()
    registry.register(att)

    def collection(at: float) -> tuple[int, float]:
        """(the pods attributed, gputide_pod_resources_up) of a collection begun at `at` on the monotonic clock."""
        wall[0] += at - mono[0]
        mono[0] = at
        return len(att.workloads(GPUS)), registry.get_sample_value("gputide_pod_resources_up")

    assert collection(0.0) == (1, 1)
    wall[0] += 3600.0   # NTP steps the wall clock an hour forward
    kubelet.silent = True
    assert collection(15.0) == (1, 0)   # A's: the first failed collection
    for t in (30.0, 45.0, 75.0):   # the HA partner's first scrape after it, and on to grace_s past it
        assert collection(t) == (1, 0)
    assert collection(75.1) == (0, 0)
    assert registry.get_sample_value("gputide_pod_resources_last_success_timestamp_seconds") == 1_000_000.0


def test_grace_s_is_timed_on_the_monotonic_clock_and_the_last_success_on_the_wall_clock():
    att = PodAttribution(Kubelet())
    assert att.clock is time.monotonic and att.wall is time.time
