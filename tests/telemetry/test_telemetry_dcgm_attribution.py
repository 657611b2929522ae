"""dcgm-exporter's own pod attribution reaches the controller: its `namespace`/`pod` labels (or, scraped by the
Prometheus Operator without honorLabels, `exported_namespace`/`exported_pod` beside the exporter's own pod) become
the snapshot's placements through the recording rule `gpu_pod:dcgm_attribution:info`, on a real Prometheus."""

from __future__ import annotations

import re
import time

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from balancer import fleet as fleet_mod
from balancer.errors import TelemetryError
from balancer.sim import SimCluster, default_mix
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target, default_rule_files
from exporters.backends.sim import SimBackend
from exporters.collector import GpuCollector
from exporters.server import serve_app

pytestmark = pytest.mark.integration

FLEET = {"apiVersion": "gputide/v1alpha1", "kind": "FleetSpec", "metadata": {"name": "dcgm"}, "spec": {"nodeGroups": [
    {"namePrefix": "direct-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 4},
    {"namePrefix": "operator-", "count": 1, "gpuModel": "H100-SXM", "gpusPerNode": 4}]}}
LINE = re.compile(r'^(DCGM_FI_\w+)\{(.*)\} (\S+)$')


def dcgm_text(sim: SimCluster) -> tuple[str, set[tuple[str, str]]]:
    """The simulated fleet as dcgm-exporter with --kubernetes would be stored: no join table, the pods as labels
    of every DCGM series (one series per pod on a shared GPU). `direct-*` nodes scraped directly, `operator-*` nodes
    through a ServiceMonitor without honorLabels. Also the truth: {(namespace/pod, UUID)}."""
    reg = CollectorRegistry()
    reg.register(GpuCollector(SimBackend(sim)))
    text = generate_latest(reg).decode()
    pods: dict[str, list[tuple[str, str]]] = {}
    for m in re.finditer(r'gputide_gpu_workload_info\{([^}]*)\}', text):
        labels = dict(re.findall(r'(\w+)="([^"]*)"', m.group(1)))
        pods.setdefault(labels["UUID"], []).append((labels["namespace"], labels["pod"]))
    out = []
    for line in text.splitlines():
        hit = LINE.match(line)
        if not hit:
            continue
        name, labels, value = hit.groups()
        uuid = re.search(r'UUID="([^"]+)"', labels).group(1)
        operator = 'Hostname="operator-' in labels
        own = ',namespace="gpu-operator",pod="nvidia-dcgm-exporter-7xk2p"' if operator else ""
        for ns, pod in pods.get(uuid, [(None, None)]):
            extra = own
            if pod is not None:
                extra += (f',exported_namespace="{ns}",exported_pod="{pod}"' if operator
                          else f',namespace="{ns}",pod="{pod}",container="main"')
            out.append(f"{name}{{{labels}{extra}}} {value}")
    truth = {(f"{ns}/{pod}", uuid) for uuid, ps in pods.items() for ns, pod in ps}
    return "\n".join(out) + "\n", truth


def test_dcgm_exporters_pod_labels_become_the_snapshots_placements(prometheus_factory):
    fleet = fleet_mod.from_dict(FLEET, "<dcgm>")
    sim = SimCluster(fleet, seed=5, step_s=60.0)
    default_mix(sim)
    sim.step()
    body, truth = dcgm_text(sim)
    assert {u for _, u in truth} and any("operator-" in g.node for g in fleet.gpus
                                         if g.uuid in {u for _, u in truth})

    def app(environ, start_response):
        start_response("200 OK", [("Content-Type", "text/plain; version=0.0.4")])
        return [body.encode()]

    server = serve_app(app, port=0)
    try:
        prom = prometheus_factory([Target("dcgm-exporter", f"127.0.0.1:{server.port}")],
                                  rule_files=default_rule_files(), scrape_interval="1s")
        source = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, scrape_interval_s=1.0), fleet=fleet)
        deadline, snap = time.time() + 40, None
        while time.time() < deadline:
            try:
                snap = source.snapshot()
                if snap.placements:
                    break
            except TelemetryError:
                pass
            time.sleep(0.5)
        assert snap is not None and snap.placements, "no snapshot with placements"
        got = {(name, snap.gpus[g].uuid) for name, gpus in snap.placements.items() for g in gpus}
        assert got == truth
        assert not any("dcgm-exporter" in name for name in snap.placements)   # the exporter's own pod is no workload
    finally:
        server.close()
