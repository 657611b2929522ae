"""MIG end to end: the sim exporter with MIG nodes -> a real Prometheus with rules/ -> the per-instance rules and
the controller's snapshot.

The fleet: an A100 80GB node partitioned 3g.40gb + 2g.20gb + 2g.20gb (the simulated GPUs at 50 % and 90 % SM
activity), an H100 node as one 3g.40gb instance (4 of its 7 slices left free), and a whole H100. The simulator is
not stepped, so every scrape publishes the same values. `gpu_instance:sm_active:ratio` must carry each instance's
share of its GPU's work, `gpu_instance:gpu_share:ratio` its compute slices over 7, and `gpu:sm_active:ratio` (what
the controller reads) the simulated GPU's own activity again, although the exporter declares the GPU-level field
unsupported on MIG GPUs.
"""

from __future__ import annotations

import time

import pytest

from balancer import fleet as fleet_mod
from balancer.errors import TelemetryError
from balancer.sim import SimCluster
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target, default_rule_files
from exporters.backends.sim import SimBackend
from exporters.collector import GpuCollector
from exporters.server import serve

pytestmark = pytest.mark.integration

FLEET = {"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "mig"}, "spec": {"nodeGroups": [
    {"namePrefix": "a100-", "count": 1, "gpuModel": "A100-SXM4-80GB", "gpusPerNode": 2,
     "mig": ["3g.40gb", "2g.20gb", "2g.20gb"]},
    {"namePrefix": "h100mig-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 1, "mig": ["3g.40gb"]},
    {"namePrefix": "h100-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 1}]}}
ACTIVITY = [0.5, 0.9, 0.4, 0.3]   # per GPU, in fleet order: a100-00/0, a100-00/1, h100mig-00/0, h100-00/0

# (hostname, gpu, GPU_I_ID, GPU_I_PROFILE) -> (SM activity, share of the GPU)
INSTANCES = {
    ("a100-00", "0", "1", "3g.40gb"): (1.0, 3 / 7), ("a100-00", "0", "2", "2g.20gb"): (0.25, 2 / 7),
    ("a100-00", "0", "3", "2g.20gb"): (0.0, 2 / 7),
    ("a100-00", "1", "1", "3g.40gb"): (1.0, 3 / 7), ("a100-00", "1", "2", "2g.20gb"): (1.0, 2 / 7),
    ("a100-00", "1", "3", "2g.20gb"): (0.65, 2 / 7),
    ("h100mig-00", "0", "1", "3g.40gb"): (0.4, 3 / 7),
}


@pytest.fixture(scope="module")
def stack(module_prometheus_factory):
    fleet = fleet_mod.from_dict(FLEET, "<mig e2e>")
    sim = SimCluster(fleet, seed=0)
    sim.sm_active[:] = ACTIVITY
    exporter = serve(GpuCollector(SimBackend(sim)), port=0)
    prom = module_prometheus_factory([Target("gputide-exporter", f"127.0.0.1:{exporter.port}")],
                                     rule_files=default_rule_files())
    # the per-instance rules and the GPU figure built on them are in different groups: wait for the last of them
    for rule, n in (("gpu_instance:sm_active:ratio", len(INSTANCES)), ("gpu_instance:gpu_share:ratio", len(INSTANCES)),
                    ("gpu:sm_active:ratio", fleet.n_gpus)):
        prom.wait_for(rule, lambda r, n=n: len(r) == n, timeout=30)
    yield sim, prom
    exporter.close()


def _by_instance(prom, rule: str) -> dict[tuple[str, str, str, str], float]:
    """The rule's value per instance, keyed as INSTANCES (hostname and gpu from the activity rule's labels)."""
    where = {(r["metric"]["UUID"], r["metric"]["GPU_I_ID"]): r["metric"]
             for r in prom.query("gpu_instance:sm_active:ratio")}
    out = {}
    for r in prom.query(rule):
        m = where[r["metric"]["UUID"], r["metric"]["GPU_I_ID"]]
        out[m["hostname"], m["gpu"], m["GPU_I_ID"], m["GPU_I_PROFILE"]] = float(r["value"][1])
    return out


def test_each_instance_reads_its_share_of_its_gpus_simulated_activity(stack):
    _, prom = stack
    got = _by_instance(prom, "gpu_instance:sm_active:ratio")
    assert got == pytest.approx({k: v for k, (v, _) in INSTANCES.items()}, abs=1e-4)


def test_each_instance_is_its_compute_slices_over_seven_of_its_gpu(stack):
    _, prom = stack
    got = _by_instance(prom, "gpu_instance:gpu_share:ratio")
    assert got == pytest.approx({k: share for k, (_, share) in INSTANCES.items()})


def test_the_gpu_figure_weighs_the_instances_back_to_the_simulated_gpus_activity(stack):
    sim, prom = stack
    got = {(r["metric"]["hostname"], r["metric"]["gpu"]): float(r["value"][1])
           for r in prom.query("gpu:sm_active:ratio")}
    want = {(g.node, str(g.slot)): a for g, a in zip(sim.fleet.gpus, ACTIVITY)}
    assert got == pytest.approx(want, abs=1e-4)


def test_the_controller_reads_a_mig_gpus_activity_not_unknown(stack):
    sim, prom = stack
    source = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0), fleet=sim.fleet)
    deadline = time.monotonic() + 30
    while True:   # every rule group has evaluated at least once (they start at different offsets)
        try:
            snap = source.snapshot()
            break
        except TelemetryError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)
    assert [g.uuid for g in snap.gpus] == [g.uuid for g in sim.fleet.gpus]
    assert list(snap.sm_active) == pytest.approx(ACTIVITY, abs=1e-4)
