"""The exporter DaemonSet probes /healthz and /readyz (exporters/health.py), not /metrics: a probe on /metrics ran a
whole NVML read every time the kubelet asked, and a slow or hung NVML call timed the probes out and had the kubelet
restart the exporter, which mends no hung driver and forgets each GPU's last XID. Liveness fails only once a
collection has been running for --stuck-after, far beyond a slow scrape; the probes answer well within a scrape
interval."""

from __future__ import annotations

import re

import pytest
from test_deploy_manifests import OVERLAYS, ROOT, one

from balancer.cli import build_parser
from balancer.cmd._args import parse_interval
from balancer.cmd.exporter import stuck_after_s

EXPORTER_OVERLAYS = [o for o in OVERLAYS if o != "overlays/with-dcgm-exporter"]
PROMETHEUS_SCRAPE_TIMEOUT_S = 10.0   # Prometheus's default; the PodMonitor sets none


def exporter(overlay: str) -> dict:
    pod = one(overlay, "DaemonSet", "gputide-exporter")["spec"]["template"]["spec"]
    return next(c for c in pod["containers"] if c["name"] == "exporter")


def scrape_interval_s(overlay: str) -> float:
    (endpoint,) = one(overlay, "PodMonitor", "gputide-exporter")["spec"]["podMetricsEndpoints"][:1]
    return parse_interval(endpoint["interval"])


@pytest.mark.parametrize("overlay", EXPORTER_OVERLAYS)
def test_the_exporter_probes_read_no_gpu(overlay):
    c = exporter(overlay)
    assert c["startupProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "metrics"}
    assert c["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "metrics"}
    assert "/metrics" not in str({k: v for k, v in c.items() if k.endswith("Probe")})


@pytest.mark.parametrize("overlay", EXPORTER_OVERLAYS)
def test_only_a_collection_that_never_returns_restarts_the_exporter(overlay):
    """A probe answers well within a scrape interval; liveness fails after --stuck-after, far beyond what
    Prometheus waits for a scrape (a slow read is not stuck), and the kubelet restarts the exporter a few probes
    later. The startup probe gives NVML's initialisation as long, and the manifest's comment gives the figures."""
    c = exporter(overlay)
    interval = scrape_interval_s(overlay)
    stuck = stuck_after_s(build_parser().parse_args(c["args"]))
    live, ready, start = c["livenessProbe"], c["readinessProbe"], c["startupProbe"]
    for probe in (live, ready, start):
        assert probe["timeoutSeconds"] <= interval / 2
    assert stuck >= max(20 * interval, 30 * PROMETHEUS_SCRAPE_TIMEOUT_S)
    restart_s = stuck + live["failureThreshold"] * live["periodSeconds"]
    assert start["failureThreshold"] * start["periodSeconds"] >= stuck
    assert (interval, stuck, restart_s) == (15.0, 300.0, 360.0)
    text = re.sub(r"\s*#\s*", " ", (ROOT / "deploy/base/exporter.yaml").read_text())
    assert "--stuck-after, 5 minutes (20 scrape intervals)" in text and "within 6 minutes" in text
