"""Scale: one reconcile cycle at 1,000 / 10,000 / 50,000 GPUs and the exporter scrape at 8 / 1,024 / 8,192 GPUs.

A cycle is exactly what `gputide run` does every interval, minus the network: `balancer.loop.Reconciler.run_once`
with a source that hands back a prebuilt `ClusterSnapshot` (observe), the real planner (plan, which simulates every
proposal on a projection), the real `SafetyGuard` (guard), the fresh-snapshot re-validation, and the dry-run
actuator. The fleet is `balancer.fleet.scaled_fleet(n)` (the demo model mix) with two workloads per GPU (two in
three inference replicas, one in three training workers, 300 milli-GPU and 8 GiB each) and 1 % of the nodes hot,
so every cycle has migrations, throttles and taints to plan, simulate and review.

Each size runs in its own subprocess (`--one N`), so peak RSS (`peak_rss_mb`) and the allocator's state of one size
do not leak into the next; tracemalloc's peak over one extra cycle gives the cycle's own allocations. The cost
model is fitted between consecutive sizes as an exponent (t ~ n^k) and as t(n) / (n log n) normalised to the
smallest size: a flat or falling ratio means cost grows no faster than n log n.

    .venv/bin/python -m bench.bench_scale
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import math
import os
import pstats
import resource
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

COMMAND = ".venv/bin/python -m bench.bench_scale"
SIZES = ((1000, 21), (10000, 11), (50000, 3))
SCRAPE_SIZES = ((8, 50), (1024, 11), (8192, 3))
# the tree before the undo-log projection and the per-snapshot indexes: timed in the same run as "before"
BEFORE_COMMIT = "bd3f5e6"
TARGET_MS, TARGET_MB = 100.0, 500.0


def build_snapshot(n_gpus: int, per_gpu: int = 2, seed: int = 0):
    """A scaled demo fleet, two workloads per GPU on 90 % of the GPUs, 1 % of nodes hot (at slowdown - 1 C)."""
    from balancer import catalog, fleet
    from balancer.model import ClusterSnapshot, Workload, WorkloadClass

    fl = fleet.scaled_fleet(n_gpus, name=f"scale-{n_gpus}")
    n = fl.n_gpus
    rng = np.random.default_rng(seed)
    specs = [catalog.CATALOGUE[g.model] for g in fl.gpus]
    slowdown = np.array([s.slowdown_temp_c for s in specs], dtype=float)
    tdp = np.array([s.tdp_w for s in specs], dtype=float)
    idle = np.array([s.idle_w for s in specs], dtype=float)
    mem_total = np.array([s.memory_mib for s in specs], dtype=float)
    resist = np.array([s.thermal_resistance_c_per_w for s in specs], dtype=float)
    busy = np.sort(rng.choice(n, size=int(n * 0.9), replace=False))
    workloads, placements = [], {}
    for i in range(n * per_gpu):
        cls = WorkloadClass.INFERENCE if i % 3 else WorkloadClass.TRAINING
        w = Workload(name=f"ns{i % 50}/w{i}", workload_class=cls, namespace=f"ns{i % 50}", owner=f"o{i % 997}",
                     priority=10 if cls is WorkloadClass.TRAINING else 100, gpu_milli=300, gpu_memory_mib=8192)
        workloads.append(w)
        placements[w.name] = (int(busy[i % len(busy)]),)
    used = np.bincount([p[0] for p in placements.values()], minlength=n)
    power = np.where(used > 0, 0.6 * tdp, idle)
    temp = 25.0 + resist * power + rng.normal(0, 1, n)
    temp = np.minimum(temp, slowdown - 20)
    hot_nodes = rng.choice(len(fl.nodes), size=max(1, len(fl.nodes) // 100), replace=False)
    node_of = {g.index: g.node for g in fl.gpus}
    hot_names = {fl.nodes[i].name for i in hot_nodes}
    hot = np.array([node_of[i] in hot_names for i in range(n)])
    temp[hot] = slowdown[hot] - 1.0
    snap = ClusterSnapshot(
        time=0.0, nodes=fl.nodes, gpus=fl.gpus, temperature_c=temp, memory_temperature_c=temp + 5,
        slowdown_temp_c=slowdown, power_w=power, power_limit_w=tdp.copy(),
        sm_active=np.where(used > 0, 0.8, 0.0), mem_used_mib=used * 8192.0, mem_total_mib=mem_total,
        sm_clock_mhz=np.full(n, 1400.0), clock_event_reasons=np.zeros(n, dtype=np.int64),
        xid=np.zeros(n, dtype=np.int64), sample_age_s=np.full(n, 5.0), workloads=tuple(workloads),
        placements=placements)
    return snap


class PrebuiltSource:
    """Observe: a new snapshot object with the prebuilt one's content on every call (no I/O, no array copies).

    A real source builds a new snapshot every cycle, so anything cached on the snapshot (its indexes by GPU, owner
    and name) is rebuilt every cycle; handing back the same object would let those caches make later cycles look
    cheaper than they are.
    """

    def __init__(self, snapshot, clock) -> None:
        self.snapshot_, self.clock = snapshot, clock

    def snapshot(self):
        from dataclasses import fields

        fresh = object.__new__(type(self.snapshot_))
        fresh.__dict__.update({f.name: getattr(self.snapshot_, f.name) for f in fields(self.snapshot_)})
        return fresh


def _reconciler(snap):
    from prometheus_client import CollectorRegistry

    from balancer.actuate.dryrun import DryRunActuator
    from balancer.loop import Reconciler
    from balancer.metrics import ControllerMetrics

    clock = iter(range(10**9)).__next__
    return Reconciler(source=PrebuiltSource(snap, clock), actuator=DryRunActuator(), clock=lambda: float(clock()),
                      metrics=ControllerMetrics(CollectorRegistry()))


def peak_rss_mb() -> float:
    """This process's peak resident set (MB): Linux's VmHWM, which belongs to the process's own address space.
    `ru_maxrss` does not: Linux keeps it across fork and exec, so a child of a parent that had grown (run_all, after
    the exporter benchmark's 8,192-GPU scrapes) started at the parent's 362 MB. ru_maxrss elsewhere."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure_one(n_gpus: int, repeats: int, profile: bool = False) -> dict:
    """Runs in its own process: build, warm up (hysteresis needs two hot readings), time `repeats` cycles."""
    rss_start = peak_rss_mb()
    t0 = time.perf_counter()
    snap = build_snapshot(n_gpus)
    build_s = time.perf_counter() - t0
    rec = _reconciler(snap)
    for _ in range(2):
        rec.run_once()
    times, cpu, actions = [], [], 0
    for _ in range(repeats):
        c0 = time.process_time()
        report = rec.run_once()
        cpu.append(time.process_time() - c0)
        times.append(report.duration_s)
        actions = len(report.plan.actions) if report.plan else 0
    tracemalloc.start()
    rec.run_once()
    _, traced_peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    out = {"gpus": snap.n_gpus, "workloads": len(snap.workloads), "nodes": len(snap.nodes),
           "median_ms": float(np.median(times)) * 1000, "cpu_median_ms": float(np.median(cpu)) * 1000,
           "p95_ms": float(np.percentile(times, 95)) * 1000,
           "actions": actions, "build_s": build_s, "rss_import_mb": rss_start,
           "rss_peak_mb": peak_rss_mb(),
           "cycle_alloc_peak_mb": traced_peak / 2**20, "status": report.status}
    if profile:
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            rec.run_once()
        prof.disable()
        buf = io.StringIO()
        pstats.Stats(prof, stream=buf).sort_stats("cumulative").print_stats(18)
        out["profile"] = buf.getvalue()
    return out


def _run_sizes(profile_at: int | None = None, tree: Path | None = None) -> list[dict]:
    """Each size in its own process; with `tree`, this script times the `balancer` package found there."""
    rows = []
    repo = Path(__file__).parents[1]
    for n, reps in SIZES:
        cmd = [sys.executable, str(Path(__file__).resolve()), "--one", str(n), "--repeats", str(reps)]
        if profile_at == n:
            cmd.append("--profile")
        env = dict(os.environ, PYTHONPATH=str(tree or repo))
        res = subprocess.run(cmd, capture_output=True, text=True, check=True, cwd=tree or repo, env=env)
        rows.append(json.loads(res.stdout.splitlines()[-1]))
    return rows


def _before_rows() -> list[dict] | None:
    """The same measurement on the `BEFORE_COMMIT` tree (exported with `git archive`); None outside a git clone."""
    from bench.trees import exported

    with exported(BEFORE_COMMIT, "balancer") as tree:
        return None if tree is None else _run_sizes(tree=tree)


def scrape_rows() -> list[dict]:
    from bench.bench_exporter import measure

    return [measure(n, reps) for n, reps in SCRAPE_SIZES]


def main() -> str:
    before = _before_rows()
    rows = _run_sizes(profile_at=50000)
    base = rows[0]
    nlogn0 = base["gpus"] * math.log(base["gpus"])
    lines = [
        "## Running at scale: one reconcile cycle and the exporter scrape", "",
        f"Command: `{COMMAND}` (each fleet size in its own subprocess). Machine: {_cpus()} CPUs, "
        f"load average {os.getloadavg()[0]:.1f} at the start.", "",
        "One cycle = `Reconciler.run_once()`: observe (prebuilt snapshot), plan (proposals simulated on a projection), "
        "guard (`SafetyGuard.review`), re-validate on the fresh snapshot, dry-run actuator. Demo model mix "
        "(`scaled_fleet`), 2 workloads per GPU on 90 % of GPUs, 1 % of nodes hot. Every observe hands back a new "
        "snapshot object (same content), so per-snapshot indexes are rebuilt every cycle as with a real source. "
        f"*Before* is the same measurement, in the same run, of the tree at commit `{BEFORE_COMMIT}` (before the "
        "undo-log projection and the per-snapshot indexes). CPU ms is the cycle's process CPU time (less sensitive "
        "to the machine's load than wall time).", "",
        "| GPUs | workloads | cycle median (ms) | CPU median (ms) | p95 (ms) | before: median (ms) | "
        "before: CPU (ms) | "
        "speed-up (CPU) | actions planned (before) | t / (n log n), normalised | exponent k vs previous (t ~ n^k) | "
        "peak RSS (MB) | RSS after imports (MB) | cycle allocations peak (MB) |",
        "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    prev = None
    for i, r in enumerate(rows):
        ratio = (r["median_ms"] / (r["gpus"] * math.log(r["gpus"]))) / (base["median_ms"] / nlogn0)
        k = (math.log(r["median_ms"] / prev["median_ms"]) / math.log(r["gpus"] / prev["gpus"])) if prev else None
        b = before[i] if before else None
        old = (f"{b['median_ms']:.1f} | {b['cpu_median_ms']:.1f} | {b['cpu_median_ms'] / r['cpu_median_ms']:.1f}x"
               if b else "n/a | n/a | n/a")
        lines.append(f"| {r['gpus']:,} | {r['workloads']:,} | {r['median_ms']:.1f} | {r['cpu_median_ms']:.1f} | "
                     f"{r['p95_ms']:.1f} | {old} | {r['actions']} ({b['actions'] if b else 'n/a'}) | {ratio:.2f} | "
                     f"{'' if k is None else f'{k:.2f}'} | {r['rss_peak_mb']:.0f} | "
                     f"{r['rss_import_mb']:.0f} | {r['cycle_alloc_peak_mb']:.1f} |")
        prev = r
    ten = min(rows, key=lambda r: abs(r["gpus"] - 10000))  # scaled_fleet rounds to whole nodes: 9,984
    k_all = math.log(rows[-1]["median_ms"] / rows[0]["median_ms"]) / math.log(rows[-1]["gpus"] / rows[0]["gpus"])
    nlogn_ok = all((r["median_ms"] / (r["gpus"] * math.log(r["gpus"]))) <= 1.15 * base["median_ms"] / nlogn0
                   for r in rows)
    ok = ten["median_ms"] < TARGET_MS and ten["rss_peak_mb"] < TARGET_MB
    cpu_ok = ten["cpu_median_ms"] < TARGET_MS
    k_cpu = (math.log(rows[-1]["cpu_median_ms"] / rows[0]["cpu_median_ms"])
             / math.log(rows[-1]["gpus"] / rows[0]["gpus"]))
    cpu_nlogn = all((r["cpu_median_ms"] / (r["gpus"] * math.log(r["gpus"])))
                    <= 1.15 * base["cpu_median_ms"] / nlogn0 for r in rows)
    lines += ["", f"Targets at {ten['gpus']:,} GPUs: median < {TARGET_MS:.0f} ms and peak RSS < {TARGET_MB:.0f} MB: "
              f"**{'met' if ok else 'NOT met'}** ({ten['median_ms']:.1f} ms, {ten['rss_peak_mb']:.0f} MB). "
              f"Growth 1k -> 50k: t ~ n^{k_all:.2f}; no faster than n log n (ratio within 15 % of the smallest "
              f"size at every size): **{'yes' if nlogn_ok else 'NO'}**. On CPU time: {ten['cpu_median_ms']:.1f} ms "
              f"at {ten['gpus']:,} GPUs (**{'met' if cpu_ok else 'NOT met'}**), t ~ n^{k_cpu:.2f}, no faster than "
              f"n log n: **{'yes' if cpu_nlogn else 'NO'}**.", ""]
    scrape = scrape_rows()
    lines += ["| exporter GPUs | scrape (collect + render) median (ms) | per GPU (µs) | "
              "baseline generate_latest on plain Gauges (ms) | speed-up |", "|---:|---:|---:|---:|---:|"]
    for s in scrape:
        lines.append(f"| {s['gpus']:,} | {s['ours'] * 1000:.1f} | {s['ours'] / s['gpus'] * 1e6:.1f} | "
                     f"{s['baseline'] * 1000:.1f} | {s['baseline'] / s['ours']:.1f}x |")
    k_scrape = math.log(scrape[-1]["ours"] / scrape[1]["ours"]) / math.log(scrape[-1]["gpus"] / scrape[1]["gpus"])
    lines += ["", f"Scrape growth 1,024 -> 8,192 GPUs: t ~ n^{k_scrape:.2f}.", ""]
    big = rows[-1]
    if "profile" in big:
        top = [ln for ln in big["profile"].splitlines() if ln.strip()][:24]
        lines += [f"cProfile of three cycles at {big['gpus']:,} GPUs (cumulative, top lines):", "", "```",
                  *top, "```", ""]
    return "\n".join(lines)


def _cpus() -> int:
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def _cli() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", type=int, help="measure one fleet size and print JSON (used by main())")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    if args.one:
        print(json.dumps(measure_one(args.one, args.repeats, args.profile)))
        return
    text = main()
    out = Path(__file__).parent / "results" / "scale.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text + "\n")
    sys.stdout.write(text + "\n")


if __name__ == "__main__":
    _cli()
