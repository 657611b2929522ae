"""End to end: simulated exporter -> real Prometheus with rules/ -> PrometheusTelemetrySource -> snapshot.

The snapshot must match the simulator's ground truth (within the rounding dcgm-exporter applies), a cooling
fault must end with GpuTemperatureHigh firing in Prometheus's own /api/v1/alerts, and a double-bit ECC error with
GpuEccUncorrectable and GpuRowRemapPending firing and the GPU flagged in the snapshot.
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

from balancer import fleet as fleet_mod
from balancer.errors import TelemetryError
from balancer.sim import SimCluster, default_mix
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target, default_rule_files
from exporters.backends.sim import SimBackend
from exporters.collector import GpuCollector
from exporters.server import serve

pytestmark = pytest.mark.integration

FLEET = {"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "e2e"}, "spec": {"nodeGroups": [
    {"namePrefix": "h100-", "count": 2, "gpuModel": "H100-SXM", "gpusPerNode": 4, "nvlinkDomainSize": 4},
    {"namePrefix": "a100-", "count": 2, "gpuModel": "A100-SXM4-80GB", "gpusPerNode": 4}]}}

# what dcgm-exporter's rounding (integer °C, W, MiB, MHz) can change, per snapshot field
TOLERANCE = {"temperature_c": 0.51, "power_w": 0.51, "mem_used_mib": 0.51, "sm_active": 0.005,
             "power_limit_w": 0.51, "sm_clock_mhz": 0.51, "slowdown_temp_c": 0.51}


@pytest.fixture
def stack(prometheus_factory):
    fleet = fleet_mod.from_dict(FLEET, "<e2e>")
    sim = SimCluster(fleet, seed=3, step_s=60.0)
    default_mix(sim)
    for _ in range(30):
        sim.step()
    lock = threading.Lock()
    exporter = serve(GpuCollector(SimBackend(sim, lock=lock)), port=0)
    prom = prometheus_factory([Target("gputide-exporter", f"127.0.0.1:{exporter.port}")],
                              rule_files=default_rule_files(), scrape_interval="1s", alert_for="0s")
    prom.wait_for("count(gpu:last_sample:timestamp_seconds)",
                  lambda r: bool(r) and float(r[0]["value"][1]) == fleet.n_gpus, timeout=30)
    source = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0), fleet=fleet)
    deadline = time.time() + 30
    while True:  # every rule group has evaluated at least once (they start at different offsets)
        try:
            source.snapshot()
            break
        except TelemetryError:
            if time.time() > deadline:
                raise
            time.sleep(0.3)
    yield sim, lock, prom, source
    exporter.close()


def _settled_snapshot(source, sim, lock):
    """Freeze the simulator, wait for a scrape + rule evaluation after the freeze, then read both sides."""
    with lock:
        truth = sim.snapshot()
        frozen_at = time.time()
    deadline = time.time() + 20
    while time.time() < deadline:
        snap = source.snapshot()
        if np.min(snap.time - snap.sample_age_s) > frozen_at + 0.5:
            return truth, snap
        time.sleep(0.3)
    raise AssertionError("Prometheus never caught up with the frozen simulator")


def test_snapshot_matches_the_simulators_ground_truth(stack):
    sim, lock, _prom, source = stack
    truth, snap = _settled_snapshot(source, sim, lock)
    assert [g.uuid for g in snap.gpus] == [g.uuid for g in truth.gpus]
    assert [n.name for n in snap.nodes] == [n.name for n in truth.nodes]
    assert [g.nvlink_domain for g in snap.gpus] == [g.nvlink_domain for g in truth.gpus]
    for name, tol in TOLERANCE.items():
        np.testing.assert_allclose(getattr(snap, name), getattr(truth, name), atol=tol, err_msg=name)
    assert snap.sample_age_s.max() < 5.0
    assert snap.memory_unhealthy.tolist() == truth.memory_unhealthy.tolist() == [False] * len(truth.gpus)
    assert set(snap.placements) == {w for w, gpus in truth.placements.items() if gpus}
    for name, gpus in snap.placements.items():
        assert gpus == tuple(sorted(truth.placements[name])), name


def test_gpu_facts_give_each_node_its_gpus_headroom_and_which_are_busy(stack):
    """What the secondary scheduler reads: per node and slot the headroom below the slowdown temperature and the
    GPUs a pod runs on, as the simulator has them; a GPU whose readings went stale is left out, not guessed."""
    sim, lock, prom, source = stack
    truth, _ = _settled_snapshot(source, sim, lock)
    facts = source.gpu_facts()
    assert set(facts) == {n.name for n in truth.nodes}
    busy = {g for gpus in truth.placements.values() for g in gpus}
    assert 0 < len(busy) < len(truth.gpus)          # both kinds of GPU are there to tell apart
    for g in truth.gpus:
        want = truth.slowdown_temp_c[g.index] - truth.temperature_c[g.index]
        assert abs(facts[g.node].headroom_c[g.slot] - want) <= 1.02, g.uuid     # dcgm-exporter's integer °C
        assert (g.slot in facts[g.node].busy) == (g.index in busy), g.uuid
    strict = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=0.001,
                                                         stale_after_intervals=1.0))
    assert strict.gpu_facts() == {}                 # every reading is older than 1 ms: nothing is fresh


def test_a_cooling_fault_fires_the_temperature_alert(stack):
    sim, lock, prom, source = stack
    node = "a100-00"
    assert not [a for a in prom.alerts() if a["labels"]["alertname"] == "GpuTemperatureHigh"]
    with lock:
        sim.degrade_cooling(node, inlet_rise_c=25.0, resistance_factor=1.6)
        for _ in range(20):
            sim.step()
        hot = sim.temperature_c[[g.index for g in sim.fleet.gpus if g.node == node]]
    assert hot.max() > 85.0, "the fault should push the node past the alert threshold"

    def firing(_):
        return [a for a in prom.alerts()
                if a["labels"]["alertname"] == "GpuTemperatureHigh" and a["state"] == "firing"]

    prom.wait_for("vector(1)", lambda r: bool(firing(r)), timeout=20)
    alerts = firing(None)
    assert {a["labels"]["hostname"] for a in alerts} == {node}
    snap = source.snapshot()
    assert snap.temperature_c[[g.index for g in snap.gpus if g.node == node]].max() > 85.0


def test_a_double_bit_ecc_error_flags_the_gpu_and_fires_the_memory_alerts_until_it_is_reset(stack):
    sim, lock, prom, source = stack
    gpu = sim.fleet.gpus[5]
    with lock:
        sim.ecc_error(gpu.index)

    def firing(names):
        return {(a["labels"]["alertname"], a["labels"]["UUID"]) for a in prom.alerts()
                if a["labels"]["alertname"] in names and a["state"] == "firing"}

    memory_alerts = {"GpuEccUncorrectable", "GpuRowRemapPending", "GpuRowRemapFailure"}
    want = {("GpuEccUncorrectable", gpu.uuid), ("GpuRowRemapPending", gpu.uuid)}
    prom.wait_for("vector(1)", lambda _: firing(memory_alerts) == want, timeout=20)
    snap = source.snapshot()
    assert np.flatnonzero(snap.memory_unhealthy).tolist() == [snap.gpu_by_uuid[gpu.uuid]]
    facts = source.gpu_facts()   # the secondary scheduler never counts it as a free slot
    assert {(host, slot) for host, f in facts.items() for slot in f.unhealthy} == {(gpu.node, gpu.slot)}
    with lock:
        sim.repair_gpu(gpu.index)
    prom.wait_for("vector(1)", lambda _: not firing(memory_alerts), timeout=20)
    deadline = time.time() + 20
    while source.snapshot().memory_unhealthy.any():
        assert time.time() < deadline, "the reset GPU stayed flagged"
        time.sleep(0.3)
