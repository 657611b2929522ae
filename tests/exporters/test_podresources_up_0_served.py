"""A silent kubelet's kept pods through `CollectHealth` (`exporters.podresources`): a scraper answered at least every
`grace_s` gets up 0 with the pods before they go, where a silent collection that outran the collection timeout was
answered with the last complete one instead (up 1, the pods), where a scraper is one of an HA pair, and where the
answer was carried long (NVML busy).

No test here waits out a timeout: a scrape's wait for a hung collection lets the test's clock move by the timeout
at once (`Waits`); real waits are bounded ones for a released collection to end."""

from __future__ import annotations

import threading

import grpc
import numpy as np
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.base import GpuIdentity, GpuReadings
from exporters.collector import GpuCollector
from exporters.health import CollectHealth, TrackedCollector, current_collection, first_collection
from exporters.podresources import Allocation, Attributed, PodAttribution

GPU = GpuIdentity("0", "GPU-0", "0000:00:00.0", "nvidia0", "NVIDIA H100 80GB HBM3", "node-a")
POD = Allocation("ml", "train-0", "main", "nvidia.com/gpu", "GPU-0")
TIMEOUT_S = 0.5   # the collection timeout here; a binary fraction, so the clock's sums are exact
BOUND_S = 10.0    # the most a test waits for a thread to get somewhere (it takes milliseconds)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Kubelet:
    """Answers `POD`, or refuses while `silent`."""

    def __init__(self) -> None:
        self.silent = False

    def list(self) -> list[Allocation]:
        if self.silent:
            raise grpc.RpcError("kubelet restarting")
        return [POD]


class Backend:
    """Reads one GPU; while `hang` is set a read waits until `release` is set (a GPU slow to answer NVML); while
    `busy`, a read gives up at once with a `TimeoutError` (`NvmlBusy`: the power-cap agent holds NVML), and the
    collection fails before it asks the kubelet."""

    identity = (GPU,)

    def __init__(self) -> None:
        self.hang = self.busy = False
        self.release = threading.Event()

    def read(self) -> GpuReadings:
        if self.busy:
            raise TimeoutError("NVML busy: the power-cap agent holds it")
        if self.hang:
            self.release.wait(BOUND_S)
        return GpuReadings(identity=self.identity, values={"DCGM_FI_DEV_GPU_TEMP": np.full(1, 50.0)})


class Ahead:
    """A collector the registry collects before the GPUs: it takes `delay_s` (on the clock) the next time, then none
    (what runs in a collection before its GPU reads begin)."""

    def __init__(self, clock: Clock) -> None:
        self.clock, self.delay_s = clock, 0.0

    def collect(self) -> list[object]:
        self.clock.now += self.delay_s
        self.delay_s = 0.0
        return []


class Exporter:
    """The exporter's registry (the GPUs, then the attribution's health) collected through `CollectHealth` on one
    clock, as `gputide exporter` is; `scrape()` is a scrape's answer (`TrackedCollector.exposition`)."""

    def __init__(self, grace_s: float, serve_stale_s: float = 120.0) -> None:   # --serve-stale-for 2m
        self.clock, self.kubelet, self.backend = Clock(), Kubelet(), Backend()
        self.attribution = PodAttribution(self.kubelet, grace_s=grace_s, clock=self.clock)
        self.ahead = Ahead(self.clock)
        registry = CollectorRegistry()
        registry.register(self.ahead)   # type: ignore[arg-type]
        registry.register(GpuCollector(Attributed(self.backend, self.attribution)))
        registry.register(self.attribution)
        self.health = CollectHealth(clock=self.clock, collect_timeout_s=TIMEOUT_S, serve_stale_s=serve_stale_s,
                                    wait=self.wait)
        self.tracked = TrackedCollector(registry, self.health)

    def wait(self, done: threading.Event, timeout: float) -> bool:
        """A scrape's wait: a hung read does not end however long one waits (the timeout passes on the clock at
        once); any other collection is waited for."""
        if self.backend.hang and not self.backend.release.is_set():
            self.clock.now += timeout
            return done.is_set()
        return done.wait(BOUND_S)

    def scrape(self, at: float) -> tuple[set[str], float, float]:
        """(the pods, gputide_pod_resources_up, the age of the collection served) of a scrape at `at`."""
        self.clock.now = at
        fams = {f.name: f for f in text_string_to_metric_families(self.tracked.exposition().decode())}
        return ({s.labels["pod"] for s in fams["gputide_gpu_workload_info"].samples},
                fams["gputide_pod_resources_up"].samples[0].value,
                fams["gputide_exporter_collection_age_seconds"].samples[0].value)

    def unhang(self) -> None:
        """The hung read returns and its collection ends (no scrape is answered with it)."""
        run = self.health._current
        assert run is not None and not run.done.is_set()
        self.backend.hang = False
        self.backend.release.set()
        assert run.done.wait(BOUND_S), "the released collection did not end"


@pytest.mark.parametrize("grace_s", [60.0, 0.0])
def test_a_first_failed_collection_that_timed_out_keeps_the_pods_for_the_next_scrape(grace_s):
    """Scrapes every 90 s. The first collection after the kubelet fell silent reads a slow GPU and outruns the
    timeout: its scrape gets the last complete collection (up 1, the pods), and its own up 0 is served to nobody.
    Timed from the first failure, the next collection (90.5 s later, past grace_s) dropped the pods: the scraper
    went from up 1 with them to up 0 without them. It keeps them with up 0, and the one after drops them."""
    exporter = Exporter(grace_s)
    assert exporter.scrape(1000) == ({"train-0"}, 1, 0)
    exporter.kubelet.silent = exporter.backend.hang = True
    assert exporter.scrape(1090) == ({"train-0"}, 1, 90.5)   # the last complete one, served stale
    exporter.unhang()   # the first failed collection ends: up 0 with the pods, served to no scrape
    assert exporter.scrape(1180) == ({"train-0"}, 0, 0)   # the first up 0 a scrape carries: the pods still in it
    assert exporter.scrape(1270) == (set(), 0, 0)
    assert exporter.scrape(1360) == (set(), 0, 0)


def test_a_timed_out_failed_collection_served_stale_later_starts_the_grace_with_the_next():
    """The first failed collection outran the timeout, then was served stale to the next scrape (whose own
    collection, begun at 1180 once the first had ended, outran it too): the grace counts from 1180, and the next
    collection, past grace_s of it, drops the pods."""
    exporter = Exporter(60.0)
    exporter.scrape(1000)
    exporter.kubelet.silent = exporter.backend.hang = True
    assert exporter.scrape(1090) == ({"train-0"}, 1, 90.5)
    exporter.unhang()
    exporter.backend.hang, exporter.backend.release = True, threading.Event()
    assert exporter.scrape(1180) == ({"train-0"}, 0, 90.5)   # the first failed collection, served stale
    exporter.unhang()
    assert exporter.scrape(1270) == (set(), 0, 0)


def test_current_collection_names_the_collection_its_thread_runs():
    """`current_collection` names the collection its thread runs (its number, when it began): the first collection
    (made as the exporter starts), a scrape's own, one that outran the timeout, and nothing outside one."""
    exporter = Exporter(60.0)
    seen: list[tuple[CollectHealth, int, float]] = []
    real_read = exporter.backend.read

    def read() -> GpuReadings:
        health, run = current_collection()   # type: ignore[misc]
        seen.append((health, run.seq, run.started))
        return real_read()

    exporter.backend.read = read   # type: ignore[method-assign]
    first_collection(exporter.tracked).join(BOUND_S)
    assert seen == [(exporter.health, 1, 1000)]
    exporter.scrape(1010)
    exporter.backend.hang = True
    exporter.scrape(1020)   # collection 3 outran the timeout
    exporter.unhang()
    exporter.scrape(1030)
    assert [s[1:] for s in seen] == [(1, 1000), (2, 1010), (3, 1020), (4, 1030)]
    assert current_collection() is None


def ha_pair_answered_from_before_the_outage() -> Exporter:
    """grace_s 60, `--serve-stale-for` 30 s: Prometheus B scrapes at 960 and 1020, A at 1000 and 1010. The kubelet
    falls silent after 1000 and the first failed collection (begun at 1010) hangs: both 1010 and 1020 are answered
    with the last complete one (up 1, the pods). It still hangs."""
    exporter = Exporter(60.0, serve_stale_s=30.0)
    assert exporter.scrape(960) == ({"train-0"}, 1, 0)   # B
    assert exporter.scrape(1000) == ({"train-0"}, 1, 0)   # A
    exporter.kubelet.silent = exporter.backend.hang = True
    assert exporter.scrape(1010) == ({"train-0"}, 1, 10.5)   # A
    assert exporter.scrape(1020) == ({"train-0"}, 1, 20)   # B
    return exporter


def test_each_prometheus_of_an_ha_pair_scraping_every_grace_s_gets_up_0_with_the_pods():
    """Prometheus B scrapes every 60 s (grace_s), its partner A in between. The first failed collection outran the
    timeout and both were answered with the last complete one (up 1, the pods); A's next scrape ran a fresh one (up
    0, the pods: served). B's next, 60 s after its last, got up 0 without the pods: grace was counted from the first
    failed collection (1010), 70 s before. Counted from the first collection of the outage begun after one of it had
    ended (1040), B gets the pods with up 0, and they go past grace_s of that."""
    exporter = ha_pair_answered_from_before_the_outage()
    exporter.unhang()   # the first failed collection ends, served to no scrape
    assert exporter.scrape(1040) == ({"train-0"}, 0, 0)   # A
    assert exporter.scrape(1080) == ({"train-0"}, 0, 0)   # B
    assert exporter.scrape(1100) == ({"train-0"}, 0, 0)   # A: 60 s after 1040, not past grace_s
    assert exporter.scrape(1140) == (set(), 0, 0)   # B
    assert exporter.scrape(1160) == (set(), 0, 0)   # A


def test_a_first_failed_collection_served_stale_late_starts_no_grace_for_an_ha_partner():
    """As above, but A's scrape at 1035 runs a collection that hangs too and is answered with the first failed one
    (begun at 1010, up 0, the pods): up 0 was served, and grace counted from 1010 dropped the pods at B's next
    scrape (1080), B's first since it got the last complete collection from before the outage (at 1020). Counted
    from the first collection begun after the first failed one ended (1035), B gets them."""
    exporter = ha_pair_answered_from_before_the_outage()
    exporter.unhang()
    exporter.backend.hang, exporter.backend.release = True, threading.Event()
    assert exporter.scrape(1035) == ({"train-0"}, 0, 25.5)   # A: the first failed collection, served stale
    exporter.unhang()
    assert exporter.scrape(1080) == ({"train-0"}, 0, 0)   # B
    assert exporter.scrape(1100) == (set(), 0, 0)   # A: over 60 s after 1035


def test_an_answer_a_scraper_was_served_for_longer_than_2_x_grace_s_keeps_its_grace():
    """`--serve-stale-for 10m`: NVML busy for 200 s, every collection failed before it asked the kubelet and
    scrapes were answered with the last complete one (begun at 1000: up 1, the pods), Prometheus B's every 60 s. The
    kubelet falls silent as NVML frees: A's scrape at 1200 says up 0 with the pods, the answer 200 s old. Over 2 x
    grace_s, A's next collection (1215) dropped them and B went from up 1 with the pods (1170) to up 0 without them
    (1230). Within grace_s + `--serve-stale-for` of it, the answer keeps its grace."""
    exporter = Exporter(60.0, serve_stale_s=600.0)
    assert exporter.scrape(990) == ({"train-0"}, 1, 0)   # B
    assert exporter.scrape(1000) == ({"train-0"}, 1, 0)   # A
    exporter.backend.busy = True
    for at in (1050, 1110, 1170):   # B
        assert exporter.scrape(at) == ({"train-0"}, 1, at - 1000)
    exporter.backend.busy, exporter.kubelet.silent = False, True
    assert exporter.scrape(1200) == ({"train-0"}, 0, 0)   # A
    assert exporter.scrape(1215) == ({"train-0"}, 0, 0)   # A: the grace is counted from here
    assert exporter.scrape(1230) == ({"train-0"}, 0, 0)   # B: its first up 0, with the pods
    assert exporter.scrape(1275) == ({"train-0"}, 0, 0)   # A: 60 s after 1215, not past grace_s
    assert exporter.scrape(1290) == (set(), 0, 0)   # B


def test_the_grace_is_timed_between_collection_starts_not_gpu_read_starts():
    """B's scrape at 999 was answered with the last complete collection from before the outage (the first failed
    one hung past the timeout); the grace is counted from A's at 1000, the first begun after that one ended. B's next
    scrape, 59 s after 1000, runs a collection that reads the GPUs 2 s after it began: timed from its GPU reads (1061),
    it dropped the pods, and B went from up 1 with them to up 0 without them. Timed from its start, it keeps them."""
    exporter = Exporter(60.0, serve_stale_s=30.0)
    assert exporter.scrape(980) == ({"train-0"}, 1, 0)   # A
    exporter.kubelet.silent = exporter.backend.hang = True
    assert exporter.scrape(990) == ({"train-0"}, 1, 10.5)   # A: the first failed collection hangs
    assert exporter.scrape(999) == ({"train-0"}, 1, 19)   # B
    exporter.unhang()   # it ends, served to no scrape
    assert exporter.scrape(1000) == ({"train-0"}, 0, 0)   # A
    exporter.ahead.delay_s = 2.0
    assert exporter.scrape(1059) == ({"train-0"}, 0, 2)   # B
    assert exporter.scrape(1061) == (set(), 0, 0)   # A: 61 s after 1000
