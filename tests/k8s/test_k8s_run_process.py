"""`gputide run` as the process a cluster runs: a real Prometheus scraping the simulated tidal fleet, the fake API
server holding a pod for every simulated workload (found through a kubeconfig), the controller started as a
subprocess and stopped with SIGTERM. It must follow the pods' watch (one list, then no list per cycle), know
every service's owner (so capacity does not hold), follow the nodes' watch too (their labels and taints), report
both watches on its metrics endpoint, and exit 0."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from urllib.request import urlopen

import pytest
from fakeapi import FakeKube, node, pod

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def pod_for(w) -> dict:
    """The pod a simulated workload would be: a service's pod labelled with its service, a training worker owned
    by its Job with its elastic bounds."""
    ns, name = w.name.split("/", 1)
    if w.workload_class.value == "inference":
        p = pod(name, ns, gpus=w.gpus, labels={"gputide.io/service": w.owner})
    else:
        p = pod(name, ns, gpus=w.gpus, owner=("Job", w.owner))
        p["metadata"]["annotations"] = {"gputide.io/elastic-min": str(w.elastic_min),
                                        "gputide.io/elastic-max": str(w.elastic_max)}
    p["spec"]["priority"] = w.priority
    return p


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def sample(text: str, series: str) -> float | None:
    m = re.search(rf"^{re.escape(series)} (\S+)$", text, re.M)
    return float(m.group(1)) if m else None


WATCHED = ("pods", "nodes", "jobs", "poddisruptionbudgets", "namespaces")   # every watch of gputide run


def test_gputide_run_follows_the_pods_watch_and_stops_cleanly(prometheus_factory, kube: FakeKube, kubeconfig,
                                                             tmp_path):
    from balancer.app import scenarios, tidal
    from balancer.telemetry.promserver import Target, default_rule_files
    from exporters.backends.sim import SimBackend
    from exporters.collector import GpuCollector
    from exporters.server import serve
    from tests.capacity.run_files import capacity_args

    sim, _events, _days = scenarios.build("tidal", days=1)
    tc = tidal.context(sim)
    for w in sim.workloads.values():
        kube.add(pod_for(w))
    for n in sim.fleet.nodes:
        kube.add(node(n.name, n.gpu_count))
    exporter = serve(GpuCollector(SimBackend(sim, lock=threading.Lock())), port=0)
    port = free_port()
    proc = None
    try:
        prom = prometheus_factory([Target("gputide-exporter", f"127.0.0.1:{exporter.port}")],
                                  rule_files=default_rule_files(), scrape_interval="1s")
        # started while Prometheus takes its first scrapes (the process's imports take as long): the cycles before
        # its data count as fail-static, not ok
        proc = subprocess.Popen(
            [sys.executable, "-m", "balancer.cli", "run", "--prometheus", prom.url, "--kubeconfig", kubeconfig,
             "--dry-run", *capacity_args(tmp_path, tc.profiles), "--interval", "1s",
             "--metrics-port", str(port), "--forecast-model", "persistence"],
            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        prom.wait_for("gputide_inference_replicas", bool, timeout=30)
        text, deadline = "", time.monotonic() + 120
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                text = urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                text = ""
            if (sample(text, 'gputide_reconcile_total{result="ok"}') or 0) >= 4 and all(
                    sample(text, f'gputide_kubernetes_watch_synced{{resource="{r}"}}') == 1 for r in WATCHED):
                break
            time.sleep(0.5)
        else:
            pytest.fail(f"no four cycles with synced watches: rc {proc.poll()}\n{text[-2000:]}")
        probes = {path: urlopen(f"http://127.0.0.1:{port}{path}", timeout=5).read().decode()
                  for path in ("/healthz", "/readyz")}   # 200, or urlopen raises
    finally:
        exporter.close()
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        out = proc.communicate(timeout=60)[0] if proc is not None else ""
    assert proc.returncode == 0, out[-3000:]
    assert all(text.startswith("ok: the last iteration ended") for text in probes.values()), probes
    assert sample(text, 'gputide_kubernetes_watch_failures{resource="pods"}') == 0
    assert "gputide_capacity_holding{" not in text, text   # every service's pods have an owner
    for phase in ("status.phase%3DRunning", "status.phase%21%3DRunning"):   # running pods; finished ones
        pods = [r for r in kube.requests if r.path == "/api/v1/pods" and phase in r.query]
        lists = [r for r in pods if "watch=true" not in r.query]
        watches = [r for r in pods if "watch=true" in r.query]
        assert 1 <= len(lists) <= 2 and watches, (phase, len(lists), len(watches))   # 4+ cycles, no list per cycle
    node_lists = [r for r in kube.requests if r.path == "/api/v1/nodes" and "watch=true" not in r.query]
    assert 1 <= len(node_lists) <= 2, len(node_lists)
    assert "are not Kubernetes nodes" not in out   # every GPU host was matched to its Node by name
    assert "Traceback" not in out, out[-3000:]
