"""The soak's loop without a real Prometheus: how long a reconcile waits for a fresh scrape (not at all while none
can come), how old a reading its replicas accept, and the gc.freeze that keeps the harness's objects out of the
automatic collections while each memory sample still collects them all."""

from __future__ import annotations

import dataclasses
import gc
import time
from dataclasses import dataclass
from types import SimpleNamespace

import pytest

from balancer.app import soak as soak_mod
from balancer.app import soak_checks
from balancer.app.soak import (
    FRESH_WAIT_S,
    STALE_MARGIN_S,
    Soak,
    SoakConfig,
    reconciles_per_cycle,
    telemetry_options,
)
from balancer.app.soak_faults import ExporterRestart, NanBurst, TelemetryGap
from balancer.errors import StaleTelemetry
from balancer.telemetry.prometheus import PrometheusTelemetrySource
from tests.telemetry.test_telemetry_prometheus_unit import GPUS, NOW, FakeClient


class FakeProm:
    """Prometheus as `Soak._wait_fresh` reads it: each query answers the next of `answers`, the last one repeats."""

    url = "http://prom.invalid"

    def __init__(self, *answers: list[dict], running: bool = True) -> None:
        self.answers, self.running, self.queries = list(answers) or [[]], running, 0

    def query(self, promql: str) -> list[dict]:
        self.queries += 1
        return self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]

    def alerts(self) -> list[dict]:
        return []


@dataclass
class FakeExporter:
    running: bool = True
    failing: bool = False


def sampled(at: float) -> list[dict]:
    """The oldest GPU sample, as min(gpu:last_sample:timestamp_seconds) answers."""
    return [{"metric": {}, "value": [at, str(at)]}]


@pytest.fixture(scope="module")
def soak(tmp_path_factory):
    cfg = dataclasses.replace(SoakConfig.short_run(), days=0.1, gpus=16, kube=False)   # its 500 ms scrapes
    return Soak(cfg, tmp_path_factory.mktemp("soak"), say=lambda _: None)


# ---- the wait for a fresh scrape --------------------------------------------------------------------------------

@pytest.fixture
def slept(monkeypatch) -> list[float]:
    """Each pause `Soak._wait_fresh` makes (taken as made: the wall clock moves on as it would). 'At once' is no
    pause, not a wall-time bound, which a loaded machine that deschedules the test for a second or two fails."""
    pauses: list[float] = []

    def sleep(s: float) -> None:
        pauses.append(s)
        time.sleep(s)

    monkeypatch.setattr(soak_mod, "time", SimpleNamespace(monotonic=time.monotonic, time=time.time, sleep=sleep))
    return pauses


@pytest.mark.parametrize("exporter", [FakeExporter(running=False), FakeExporter(failing=True)],
                         ids=["exporter-stopped", "exporter-answers-500"])
def test_the_wait_returns_at_once_once_prometheus_dropped_the_series_of_an_exporter_that_is_down(
        soak, exporter, slept):
    soak.prom, soak.exporter = FakeProm([]), exporter
    assert soak._wait_fresh(time.time(), cap_s=5.0) is False
    assert soak.prom.queries == 1 and slept == []   # not the 5 s cap


def test_the_wait_returns_at_once_while_prometheus_is_stopped(soak, slept):
    soak.prom, soak.exporter = FakeProm(running=False), FakeExporter()
    assert soak._wait_fresh(time.time(), cap_s=5.0) is False
    assert soak.prom.queries == 0 and slept == []


def test_with_the_exporter_down_the_wait_lasts_until_prometheus_has_dropped_its_series(soak):
    # the series stay until Prometheus fails a scrape of the exporter: the controller must read them gone
    old = sampled(time.time() - 1.0)
    soak.prom, soak.exporter = FakeProm(old, old, []), FakeExporter(running=False)
    assert soak._wait_fresh(time.time(), cap_s=5.0) is False
    assert soak.prom.queries == 3


def test_with_the_exporter_up_the_wait_waits_for_a_fresh_sample_up_to_its_cap(soak):
    soak.prom, soak.exporter = FakeProm([]), FakeExporter()   # not scraped since the move yet
    t0 = time.monotonic()
    assert soak._wait_fresh(time.time(), cap_s=0.4) is False
    assert time.monotonic() - t0 >= 0.4 and soak.prom.queries > 1
    since = time.time()
    soak.prom = FakeProm(sampled(since - 1.0), sampled(since + 0.2))
    assert soak._wait_fresh(since, cap_s=5.0) is True
    assert soak.prom.queries == 2


# ---- the age a replica accepts ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("age_s", "stale"), [(4.0, False), (0.5 + STALE_MARGIN_S + 1.0, True)])
def test_a_replica_reads_what_a_loaded_prometheus_serves_and_refuses_older(soak, age_s, stale):
    # measured on 2 loaded cores: the short soak's Prometheus (500 ms scrapes) served samples 2-4 s old, which the
    # replicas refused past 2 s (4 scrape intervals) and held still for stale telemetry with nothing stale
    soak.prom, soak.audit = FakeProm(), None
    replica = soak._replica("gputide-t", 0)
    try:
        opts = replica.reconciler.source.opts
    finally:
        replica.kill()
    client = FakeClient(values={(uuid, "last_sample"): NOW - age_s for _host, _slot, uuid, _model in GPUS})
    source = PrometheusTelemetrySource(opts, client=client, clock=lambda: NOW)
    if stale:
        with pytest.raises(StaleTelemetry):
            source.snapshot()
    else:
        assert source.snapshot().sample_age_s.max() == pytest.approx(age_s)


@pytest.mark.parametrize("cfg", [SoakConfig(), SoakConfig.short_run()], ids=["7-day", "short"])
@pytest.mark.parametrize("fault", [ExporterRestart(), TelemetryGap(), NanBurst()], ids=lambda f: f.name)
def test_the_stale_limit_is_reached_within_a_telemetry_faults_window(cfg, fault):
    # were the series of a failed scrape served on (Prometheus drops them), each of the window's reconciles would
    # wait out its cap: the limit must pass before the last of them, or the soak would act on them throughout
    limit = telemetry_options("http://prom.invalid", cfg.scrape_interval).stale_after_s
    waited = fault.cycles * reconciles_per_cycle(cfg.minutes_per_cycle) * FRESH_WAIT_S
    assert limit + FRESH_WAIT_S <= waited


# ---- gc.freeze ---------------------------------------------------------------------------------------------------

def test_the_loop_runs_frozen_and_each_memory_sample_collects_unfrozen(soak, monkeypatch):
    soak.prom, soak.exporter = FakeProm(sampled(time.time() + 1e6)), FakeExporter()
    reconciles, samples, drains = [], [], []
    monkeypatch.setattr(soak, "_reconcile", lambda active: reconciles.append(gc.get_freeze_count()))
    monkeypatch.setattr(soak_checks, "settled_rss_mib", lambda: samples.append(gc.get_freeze_count()) or 100.0)
    monkeypatch.setattr(soak.alerts, "drain", lambda s, cycle: drains.append((cycle, gc.get_freeze_count())))
    try:
        soak._loop(2, [], every=100, first=100)
    finally:
        after = gc.get_freeze_count()
        gc.unfreeze()
    assert len(reconciles) == 2 * soak.steps and min(reconciles) > 0, reconciles   # frozen while it runs
    assert samples == [0, 0]   # each sample's collection walks every object
    assert len(drains) == 1 and drains[0][0] == 2   # the drain after the last cycle
    assert after == 0          # and nothing is left frozen
