"""Exporter scrape time: the sim exporter's full collect + text rendering at 8, 1,024 and 8,192 GPUs.

A scrape = `GpuCollector.collect()` (backend read, metric families) + `exporters.exposition.render`, exactly what
the HTTP handler runs. Baseline (same run): prometheus_client's `generate_latest` over a registry of plain
labelled `Gauge`s holding the same number of per-GPU samples (every DCGM field x GPUs), i.e. the cost of the obvious
implementation before any read happens. One HTTP round trip at 1,024 GPUs is measured too.

    .venv/bin/python -m bench.bench_exporter
"""

from __future__ import annotations

import os
import statistics
import time
import urllib.request
from pathlib import Path

from prometheus_client import CollectorRegistry, Gauge, generate_latest

from balancer import fleet as fleet_mod
from balancer.sim import SimCluster, default_mix
from exporters.backends.base import LABEL_NAMES
from exporters.backends.sim import SimBackend
from exporters.collector import GPU_FIELDS, GpuCollector
from exporters.exposition import render
from exporters.server import serve

COMMAND = ".venv/bin/python -m bench.bench_exporter"


def _sim(n: int) -> SimCluster:
    fleet = fleet_mod.scaled_fleet(n) if n > 8 else fleet_mod.build("one-node", fleet_mod.demo_fleet().nodes[:1])
    sim = SimCluster(fleet, seed=0)
    default_mix(sim)
    sim.advance_to(600)
    return sim


def _median_time(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _baseline_registry(backend: SimBackend) -> CollectorRegistry:
    reg = CollectorRegistry()
    readings = backend.read()
    for name, _typ, doc in GPU_FIELDS:
        if name not in readings.values:   # a field the backend does not publish (the simulator's FB_RESERVED)
            continue
        g = Gauge(name, doc, LABEL_NAMES, registry=reg)
        for ident, v in zip(readings.identity, readings.values[name].tolist()):
            g.labels(*ident.labels().values()).set(v)
    return reg


def measure(n: int, repeat: int) -> dict:
    sim = _sim(n)
    backend = SimBackend(sim)
    reg = CollectorRegistry()
    reg.register(GpuCollector(backend))
    render(reg)  # warm the label caches, as every scrape after the first finds them
    ours = _median_time(lambda: render(reg), repeat)
    body = render(reg)
    base_reg = _baseline_registry(backend)
    base = _median_time(lambda: generate_latest(base_reg), max(1, repeat // 3))
    return {"gpus": sim.n_gpus, "ours": ours, "baseline": base, "bytes": len(body), "reg": reg}


def main() -> str:
    rows = [measure(8, 50), measure(1024, 15), measure(8192, 3)]
    r1024 = rows[1]
    server = serve(r1024["reg"], port=0)
    try:
        url = f"http://127.0.0.1:{server.port}/metrics"
        urllib.request.urlopen(url).read()
        http = _median_time(lambda: urllib.request.urlopen(url).read(), 10)
    finally:
        server.close()
    lines = [
        "## Exporter scrape time (exporters/, sim backend)",
        "",
        "| GPUs | scrape (collect + render), median | per GPU | exposition size | baseline: generate_latest on plain "
        "Gauges, same samples | speed-up |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(f"| {r['gpus']:,} | {r['ours'] * 1e3:.1f} ms | {r['ours'] / r['gpus'] * 1e6:.1f} µs | "
                     f"{r['bytes'] / 1024:,.0f} KiB | {r['baseline'] * 1e3:.1f} ms | "
                     f"{r['baseline'] / r['ours']:.1f}x |")
    lines += [
        "",
        f"1,024-GPU scrape: **{r1024['ours'] * 1e3:.1f} ms** (target < 50 ms); over HTTP (loopback, wsgiref) "
        f"{http * 1e3:.1f} ms. Every scrape reads the simulator and emits {len(GPU_FIELDS)} DCGM series per GPU plus "
        "attribution, serving and self-metrics series.",
        f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end of the run.",
        "",
        f"Command: `{COMMAND}`",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    text = main()
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "exporter.md").write_text(text)
    print(text)
