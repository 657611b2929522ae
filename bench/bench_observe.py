"""Observe: what `PrometheusTelemetrySource.snapshot()` costs the controller at 1,000 and 10,000 GPUs.

The scale benchmark starts each cycle from a prebuilt snapshot; this one measures the step before it: reading
Prometheus's answer (one instant query for 12 normalised series per GPU, plus the workload join table) into a
`ClusterSnapshot`. Two parts:

* stubbed: the Prometheus client answers each query as Prometheus would, from an in-memory fleet, already decoded;
  CPU of `snapshot()` (steady state: the median of 5 snapshots after a first one, the fleet unchanged, as in a
  running controller), and apart from it the size and decode time of the JSON body of the GPU query's answer;
* real: a real Prometheus (the shipped recording rules over the simulated exporter of 10,000 GPUs, on loopback)
  answers `snapshot()` end to end: its wall time, the controller's CPU, the bytes received, and what Prometheus
  spends on the GPU query itself (`stats=all`). Skipped when the `prometheus` binary is not installed.

*Before*: the same measurements, in the same run, of the tree at `BEFORE_COMMIT` (exported with `git archive`),
whose GPU query brought every series with all its labels.

    .venv/bin/python -m bench.bench_observe
"""

from __future__ import annotations

import gc
import json
import shutil
import statistics
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

COMMAND = ".venv/bin/python -m bench.bench_observe"
SIZES = (1000, 10000)
REAL_SIZE = 10000
BEFORE_COMMIT = "487169e"
ROOT = Path(__file__).resolve().parents[1]
SLIM = "max by (__name__, UUID) ("   # how the GPU query asks for the numeric fields without the GPU's labels


def _answer(n: int) -> tuple[list, list, object]:
    from balancer import fleet as fleet_mod
    from balancer.telemetry.prometheus import FIELDS

    fl = fleet_mod.scaled_fleet(n)
    now = round(time.time(), 3)   # Prometheus's timestamps have milliseconds
    values = {"gpu:last_sample:timestamp_seconds": now, "gpu:memory_used:bytes": 2**34, "gpu:memory_free:bytes": 2**35,
              "gpu:sm_clock:hertz": 1.7e9, "gpu:power_limit:watts": 700, "gpu:sm_active:ratio": 0.5}
    rows = [{"metric": {"__name__": rule, "hostname": g.node, "gpu": str(g.slot), "UUID": g.uuid,
                        "modelName": "NVIDIA H100 80GB HBM3", "cluster": "c1"},
             "value": [now, str(values.get(rule, 60))]} for g in fl.gpus for rule, _ in FIELDS.values()]
    joins = [{"metric": {"__name__": "gputide_gpu_workload_info", "UUID": g.uuid, "namespace": "ns",
                         "pod": f"p{g.index}", "workload_class": "training"}, "value": [now, "1"]} for g in fl.gpus]
    return rows, joins, fl


def answered(promql: str, rows: list) -> list:
    """What Prometheus answers to the GPU query `promql`: every series with its labels, or, for the query that asks
    for the numeric fields by `__name__` and `UUID` `or` last_sample, those two labels on all but last_sample."""
    if not promql.startswith(SLIM):
        return rows
    keep = "gpu:last_sample:timestamp_seconds"
    return [r if r["metric"]["__name__"] == keep else
            {"metric": {"__name__": r["metric"]["__name__"], "UUID": r["metric"]["UUID"]}, "value": r["value"]}
            for r in rows]


def _snapshot_cpu(rows: list, joins: list, fl: object) -> tuple[float, float, list]:
    """CPU of the first `snapshot()` and the median of 5 after it; the GPU query's answer as served."""
    from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

    served: dict[str, list] = {}
    slim = answered(SLIM, rows)   # both shapes built before the clock starts: as decoded, not built per query

    class Client:
        def custom_query(self, promql):
            if "workload_info" in promql:
                return joins
            if "inference" in promql:
                return []
            served["gpu"] = slim if promql.startswith(SLIM) else rows
            return served["gpu"]

    src = PrometheusTelemetrySource(PrometheusOptions(url="http://stub", scrape_interval_s=15), fleet=fl,
                                    client=Client())
    c0 = time.process_time()
    src.snapshot()
    first = time.process_time() - c0
    cpu = []
    for _ in range(5):
        c0 = time.process_time()
        src.snapshot()
        cpu.append(time.process_time() - c0)
    return first, statistics.median(cpu), served["gpu"]


def measure_one(n: int) -> dict:
    rows, joins, fl = _answer(n)
    first, steady, answer = _snapshot_cpu(rows, joins, fl)
    body = json.dumps({"status": "success", "data": {"resultType": "vector", "result": answer}})
    del rows, joins, answer   # decoded with the same heap in both trees: the collector's passes grow with it
    gc.collect()
    decode = []
    for _ in range(3):
        c0 = time.process_time()
        json.loads(body)
        decode.append(time.process_time() - c0)
    return {"gpus": fl.n_gpus, "first": first, "steady": steady, "decode": statistics.median(decode),
            "mib": len(body) / 2**20}


def measure_real(url: str, n: int) -> dict:
    """`snapshot()` against the real Prometheus at `url` (serving the simulated `scaled_fleet(n)`)."""
    from balancer import fleet as fleet_mod
    from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

    src = PrometheusTelemetrySource(PrometheusOptions(url=url, scrape_interval_s=30, timeout_s=60),
                                    fleet=fleet_mod.scaled_fleet(n))
    received: list[int] = []
    src.client._session.hooks["response"].append(lambda r, *a, **k: received.append(len(r.content)))
    src.snapshot()
    wall, cpu = [], []
    for _ in range(3):
        received.clear()
        t0, c0 = time.perf_counter(), time.process_time()
        src.snapshot()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall": wall, "cpu": cpu, "mib": sum(received) / 2**20}


@contextmanager
def _real_prometheus(n: int) -> Iterator[str]:
    """A real Prometheus with the shipped rules scraping a frozen rendering of the simulated exporter of n GPUs."""
    from balancer import fleet as fleet_mod
    from balancer.sim import SimCluster, default_mix
    from balancer.telemetry.prometheus import FIELDS, OPTIONAL
    from balancer.telemetry.promserver import PrometheusServer, Target, default_rule_files
    from exporters.backends.sim import SimBackend
    from exporters.collector import GpuCollector
    from exporters.exposition import CONTENT_TYPE, render

    sim = SimCluster(fleet_mod.scaled_fleet(n), seed=1, step_s=60.0)
    default_mix(sim)
    sim.step()
    body = render(GpuCollector(SimBackend(sim)))

    class Metrics(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(200)
            self.send_header("Content-Type", CONTENT_TYPE)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Metrics)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    try:
        with PrometheusServer([Target("sim", f"127.0.0.1:{httpd.server_address[1]}")],
                              rule_files=default_rule_files(), scrape_interval="30s") as prom:
            for name, (rule, _) in FIELDS.items():
                if name not in OPTIONAL:
                    prom.wait_for(f"count({rule})", lambda r: bool(r) and float(r[0]["value"][1]) == sim.fleet.n_gpus,
                                  timeout=300)
            yield prom.url
    finally:
        httpd.shutdown()
        httpd.server_close()


def _server_side(url: str, queries: dict[str, str]) -> dict[str, dict]:
    """Prometheus's own time for each query (execTotalTime of `stats=all`) and the HTTP round trip, median of 7,
    the queries in turn so that the rule evaluations and the machine's load fall on all of them."""
    import requests

    times: dict[str, dict[str, list]] = {k: {"exec": [], "http": []} for k in queries}
    for _ in range(7):
        for key, promql in queries.items():
            t0 = time.perf_counter()
            answer = requests.get(f"{url}/api/v1/query", params={"query": promql, "stats": "all"}, timeout=60)
            times[key]["http"].append(time.perf_counter() - t0)
            times[key]["exec"].append(answer.json()["data"]["stats"]["timings"]["execTotalTime"])
    return {k: {m: statistics.median(v) for m, v in t.items()} for k, t in times.items()}


def _real_rows() -> tuple[str, list[list[str]]] | None:
    """Prometheus's version and the real-Prometheus table's rows (before, now, ratio), or None without the binary."""
    import requests

    from balancer.telemetry.prometheus import FIELDS, PrometheusOptions, PrometheusTelemetrySource
    from bench.trees import now_and_before

    if shutil.which("prometheus") is None:
        return None
    with _real_prometheus(REAL_SIZE) as url:
        old_query = '{__name__=~"' + "|".join(rule for rule, _ in FIELDS.values()) + '"}'
        new_query = PrometheusTelemetrySource(PrometheusOptions(url=url), client=object())._gpu_query()
        server = _server_side(url, {"before": old_query, "now": new_query})
        version = requests.get(f"{url}/api/v1/status/buildinfo", timeout=10).json()["data"]["version"]
        nows, befores = now_and_before("bench_observe", BEFORE_COMMIT, [f"measure_real({url!r}, {REAL_SIZE})"] * 3)
    now, before = ({"mib": runs[0]["mib"], **{k: statistics.median(x for r in runs for x in r[k]) for k in ("wall", "cpu")}}
                   for runs in (nows, befores))
    rows = []
    for label, r, s in (("before", before, server["before"]), ("now", now, server["now"])):
        rows.append([label, f"{r['mib']:.1f} MiB", f"{s['exec'] * 1e3:.0f} ms", f"{s['http'] * 1e3:.0f} ms",
                     f"{r['cpu'] * 1e3:.0f} ms", f"{r['wall'] * 1e3:.0f} ms"])
    b, n, sb, sn = before, now, server["before"], server["now"]
    rows.append(["before / now", f"{b['mib'] / n['mib']:.2f}x", f"{sb['exec'] / sn['exec']:.2f}x",
                 f"{sb['http'] / sn['http']:.2f}x", f"{b['cpu'] / n['cpu']:.2f}x", f"{b['wall'] / n['wall']:.2f}x"])
    return version, rows


def main() -> str:
    from bench.trees import now_and_before, section

    now, before = now_and_before("bench_observe", BEFORE_COMMIT, [f"measure_one({n})" for n in SIZES])
    text = section(
        "Observe: Prometheus answer -> ClusterSnapshot (balancer/telemetry/prometheus.py)",
        f"Command: `{COMMAND}`. Stubbed: the client answers each query as Prometheus would, already decoded; CPU of "
        "`snapshot()`, each size and tree in its own process, steady state = median of 5 snapshots after the first, "
        "the fleet unchanged; apart from it the size and the decode time (`json.loads`, median of 3) of the JSON body "
        f"of the GPU query's answer. Before = the tree at `{BEFORE_COMMIT}` (every GPU series with all its labels), "
        "same run; now = the numeric fields keyed by `__name__` and `UUID`, one series per GPU with its labels.",
        ["GPUs", "answer before", "answer now", "decode before", "decode now", "decode speed-up",
         "snapshot before", "snapshot now", "decode + snapshot before", "decode + snapshot now", "speed-up"],
        [[f"{a['gpus']:,}", f"{b['mib']:.1f} MiB", f"{a['mib']:.1f} MiB", f"{b['decode'] * 1e3:.0f} ms",
          f"{a['decode'] * 1e3:.0f} ms", f"{b['decode'] / a['decode']:.2f}x", f"{b['steady'] * 1e3:.0f} ms",
          f"{a['steady'] * 1e3:.0f} ms", f"{(b['decode'] + b['steady']) * 1e3:.0f} ms",
          f"{(a['decode'] + a['steady']) * 1e3:.0f} ms",
          f"{(b['decode'] + b['steady']) / (a['decode'] + a['steady']):.2f}x"] for a, b in zip(now, before, strict=True)],
    )
    real = _real_rows()
    if real is None:
        return text + "\nReal Prometheus: not measured (no `prometheus` binary on PATH).\n"
    head = ["tree", "bytes received per snapshot", "Prometheus exec (GPU query)", "HTTP round trip (GPU query)",
            "controller CPU per snapshot", "snapshot() wall"]
    version, real = real
    lines = [f"Real Prometheus {version} on loopback, {REAL_SIZE:,} simulated GPUs (`scaled_fleet`), the shipped recording "
             "rules, 30 s scrape and evaluation interval: `snapshot()` end to end (3 x 3 snapshots after a first, the "
             "trees in turn, median; "
             "wall includes Prometheus's evaluation, its JSON encoding, the transfer and the decode), and the GPU "
             "query alone with `stats=all` (median of 7). Same run, both trees against the same server.", "",
             "| " + " | ".join(head) + " |", "|" + "---:|" * len(head)]
    lines += ["| " + " | ".join(row) + " |" for row in real]
    return text + "\n" + "\n".join(lines) + "\n"


if __name__ == "__main__":
    print(main())
