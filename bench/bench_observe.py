"""Observe: what `PrometheusTelemetrySource.snapshot()` costs the controller at 1,000 and 10,000 GPUs.

The scale benchmark starts each cycle from a prebuilt snapshot; this one measures the step before it: turning
Prometheus's answer (one instant query, 12 normalised series per GPU, plus the workload join table) into a
`ClusterSnapshot`. The Prometheus client is stubbed with the already-decoded answer, so the figure is the
controller's own parsing and checking; decoding the JSON body is timed apart (it is the same in both trees).
Steady state: the median of 5 snapshots after a first one, the fleet unchanged between them, as in a running
controller. *Before*: the same measurement, in the same run, of the tree at `BEFORE_COMMIT` (exported with `git
archive`), the parser before its vectorisation and topology cache.

    .venv/bin/python -m bench.bench_observe
"""

from __future__ import annotations

import json
import statistics
import time
from pathlib import Path

COMMAND = ".venv/bin/python -m bench.bench_observe"
SIZES = (1000, 10000)
BEFORE_COMMIT = "0d6ec43"
ROOT = Path(__file__).resolve().parents[1]


def _answer(n: int) -> tuple[list, list, object]:
    from balancer import fleet as fleet_mod
    from balancer.telemetry.prometheus import FIELDS

    fl = fleet_mod.scaled_fleet(n)
    now = time.time()
    values = {"gpu:last_sample:timestamp_seconds": now, "gpu:memory_used:bytes": 2**34, "gpu:memory_free:bytes": 2**35,
              "gpu:sm_clock:hertz": 1.7e9, "gpu:power_limit:watts": 700, "gpu:sm_active:ratio": 0.5}
    rows = [{"metric": {"__name__": rule, "hostname": g.node, "gpu": str(g.slot), "UUID": g.uuid,
                        "modelName": "NVIDIA H100 80GB HBM3", "cluster": "c1"},
             "value": [now, str(values.get(rule, 60))]} for g in fl.gpus for rule, _ in FIELDS.values()]
    joins = [{"metric": {"__name__": "gputide_gpu_workload_info", "UUID": g.uuid, "namespace": "ns",
                         "pod": f"p{g.index}", "workload_class": "training"}, "value": [now, "1"]} for g in fl.gpus]
    return rows, joins, fl


def measure_one(n: int) -> dict:
    from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

    rows, joins, fl = _answer(n)

    class Client:
        def custom_query(self, promql):
            return joins if "workload_info" in promql else [] if "inference" in promql else rows

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
    body = json.dumps(rows)
    c0 = time.process_time()
    json.loads(body)
    return {"gpus": fl.n_gpus, "first": first, "steady": statistics.median(cpu), "decode": time.process_time() - c0,
            "mib": len(body) / 2**20}


def main() -> str:
    from bench.trees import now_and_before, section

    now, before = now_and_before("bench_observe", BEFORE_COMMIT, [f"measure_one({n})" for n in SIZES])
    return section(
        "Observe: Prometheus answer -> ClusterSnapshot (balancer/telemetry/prometheus.py)",
        f"Command: `{COMMAND}`. CPU time of `snapshot()` with the decoded answer stubbed in (12 series per GPU and "
        "the workload join table), each size and tree in its own process; steady state = median of 5 snapshots "
        f"after the first, the fleet unchanged. Before = the tree at `{BEFORE_COMMIT}`, same run. Decoding the JSON "
        "body (not part of either figure) is shown for scale.",
        ["GPUs", "answer", "first snapshot", "steady state", "before: first", "before: steady",
         "speed-up (steady)", "JSON decode"],
        [[f"{a['gpus']:,}", f"{a['mib']:.1f} MiB", f"{a['first'] * 1e3:.0f} ms", f"{a['steady'] * 1e3:.0f} ms",
          f"{b['first'] * 1e3:.0f} ms", f"{b['steady'] * 1e3:.0f} ms", f"{b['steady'] / a['steady']:.1f}x",
          f"{a['decode'] * 1e3:.0f} ms"] for a, b in zip(now, before, strict=True)],
    )

if __name__ == "__main__":
    print(main())
