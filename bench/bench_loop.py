"""The reconcile loop: the hotspot scenario under `none`, `gputide` and throttle-only, and plan() at scale.

Hotspot (`gputide simulate --scenario hotspot`): 64 GPUs, ~86% allocated (three tidal inference services, four
elastic training jobs); on day one at 13:00 one air-cooled node's cooling degrades for six hours. Targets:
GPU-seconds above slowdown cut by >= 90% against `none`, SLO attainment no worse, training progress within 2%.
`throttle-only` is gputide with migration switched off (`spec.hotspots.migrate: false`), measured to show why
the policy prefers moving work to capping power.

plan() timing: hand-built fleets of 1,000 and 10,000 GPUs with two workloads per GPU and one hot node, median of
repeated calls. Baseline (same run): the same detection and coolest-fitting-target search written the obvious
way, per GPU and per workload in Python (`naive_plan`), on the same snapshot.

    .venv/bin/python -m bench.bench_loop
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from balancer import catalog, fleet
from balancer.app import scenarios
from balancer.config import BalancerPolicy
from balancer.model import ClusterSnapshot, Node, Workload, WorkloadClass
from balancer.plan.planner import plan

COMMAND = ".venv/bin/python -m bench.bench_loop"
DAYS = 2.0


def hotspot(policy_name: str, policy: BalancerPolicy | None = None) -> dict:
    sim, events, _ = scenarios.build("hotspot", seed=0)
    with tempfile.TemporaryDirectory() as out:
        t0 = time.perf_counter()
        name = "gputide" if policy_name == "throttle-only" else policy_name
        s = scenarios.run_simulation(sim, name, DAYS, 60.0, out, events=events, scenario="hotspot", policy=policy,
                                     plots=False)
        s["wall_s"] = time.perf_counter() - t0
    return s


def synthetic(n_gpus: int, per_gpu: int = 2) -> ClusterSnapshot:
    nodes = [Node(name=f"n{i:05d}", gpu_model="A100-SXM4-80GB", gpu_count=8) for i in range(n_gpus // 8)]
    fl = fleet.build("bench", nodes)
    spec = catalog.get("A100-SXM4-80GB")
    rng = np.random.default_rng(0)
    n = fl.n_gpus
    free = set(int(g) for g in rng.choice(np.arange(8, n), size=n // 10, replace=False))  # 10% idle: room to move
    busy = [g for g in range(n) if g not in free]
    workloads, placements = [], {}
    for i in range(n * per_gpu):
        cls = WorkloadClass.INFERENCE if i % 3 else WorkloadClass.TRAINING
        w = Workload(name=f"ns/w{i}", workload_class=cls, owner=f"o{i % 997}", gpu_milli=300, gpu_memory_mib=8192)
        workloads.append(w)
        placements[w.name] = (busy[i % len(busy)],)
    used = np.zeros(n)
    for g in placements.values():
        used[g[0]] += 1
    power = np.where(used > 0, 300.0, spec.idle_w)
    temp = 25.0 + spec.thermal_resistance_c_per_w * power + rng.normal(0, 1, n)
    temp[:8] = 87.0   # one hot node
    return ClusterSnapshot(
        time=0.0, nodes=fl.nodes, gpus=fl.gpus, temperature_c=temp, memory_temperature_c=temp + 5,
        slowdown_temp_c=np.full(n, spec.slowdown_temp_c), power_w=power, power_limit_w=np.full(n, spec.tdp_w),
        sm_active=np.where(used > 0, 0.8, 0.0), mem_used_mib=used * 8192, mem_total_mib=np.full(n, spec.memory_mib),
        sm_clock_mhz=np.full(n, 1400.0), clock_event_reasons=np.zeros(n, dtype=np.int64),
        xid=np.zeros(n, dtype=np.int64), sample_age_s=np.full(n, 5.0), workloads=tuple(workloads),
        placements=placements)


def naive_plan(s: ClusterSnapshot, streaks: dict, policy: BalancerPolicy) -> list:
    """Detection and coolest-target search, one GPU / one workload at a time (the baseline)."""
    hp = policy.hotspots
    gpu_list = list(s.gpus)
    hot = []
    for g in gpu_list:
        t = float(s.temperature_c[g.index])
        streaks[g.uuid] = streaks.get(g.uuid, 0) + 1 if t >= s.slowdown_temp_c[g.index] - hp.margin_c else 0
        if streaks[g.uuid] >= hp.hot_readings:
            hot.append(g)
    used = {g.index: 0 for g in gpu_list}
    mem = {g.index: 0.0 for g in gpu_list}
    for w in s.workloads:
        for i in s.placements.get(w.name, ()):
            used[i] += w.gpu_milli
            mem[i] += w.gpu_memory_mib
    hot_nodes = {g.node for g in hot}
    moves = []
    for g in hot:
        for w in s.workloads:
            if g.index not in s.placements.get(w.name, ()) or not w.movable:
                continue
            best, best_t = None, float("inf")
            for c in gpu_list:
                if c.node in hot_nodes or used[c.index] + w.gpu_milli > 1000:
                    continue
                if mem[c.index] + w.gpu_memory_mib > s.mem_total_mib[c.index]:
                    continue
                t = float(s.temperature_c[c.index])
                if t <= s.slowdown_temp_c[c.index] - hp.target_headroom_c and t < best_t:
                    best, best_t = c.index, t
            if best is not None:
                used[best] += w.gpu_milli
                mem[best] += w.gpu_memory_mib
                moves.append((w.name, best))
            break
    return moves


def time_plan(n_gpus: int, repeats: int) -> tuple[float, float, int]:
    s = synthetic(n_gpus)
    policy = BalancerPolicy()
    _, state = plan(s, None, policy)
    runs = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        p, _ = plan(s, None, policy, state)
        runs.append(time.perf_counter() - t0)
    streaks: dict = {}
    naive_plan(s, streaks, policy)
    naive = []
    for _ in range(max(3, repeats // 3)):
        t0 = time.perf_counter()
        naive_plan(s, dict(streaks), policy)
        naive.append(time.perf_counter() - t0)
    return float(np.median(runs)) * 1000, float(np.median(naive)) * 1000, len(p.actions)



def _ms(value: float | None) -> str:
    """A reconcile time for the table; `-` for a policy that ran no cycle (`none`: null in summary.json)."""
    return "-" if value is None else f"{value:.2f}"


def main() -> str:
    rows = {"none": hotspot("none"), "gputide": hotspot("gputide"),
            "throttle-only": hotspot("throttle-only", BalancerPolicy().with_section("hotspots", migrate=False))}
    base = rows["none"]
    lines = [
        "## Reconcile loop (hotspot scenario, plan() at scale)", "",
        f"Command: `{COMMAND}`. Scenario: `gputide simulate --scenario hotspot --days {DAYS:g}` (64 GPUs, 60 s "
        "steps, one node's cooling degraded for 6 h). Same seed, same workload, same fault for every policy.", "",
        "| policy | GPU-s above slowdown | cut vs none | SLO attainment | training progress (GPU-h) | vs none | "
        "preemptions | migrations | power-limit changes | max temp (C) | reconcile p50 / p99 (ms) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, s in rows.items():
        above = s["thermal"]["gpu_seconds_above_slowdown"]
        cut = 1 - above / base["thermal"]["gpu_seconds_above_slowdown"] if base["thermal"][
            "gpu_seconds_above_slowdown"] else 0.0
        prog = s["training"]["progress"] / base["training"]["progress"] - 1
        lines.append(
            f"| {name} | {above:,.0f} | {cut:.1%} | {s['inference']['slo_attainment']:.4f} | "
            f"{s['training']['progress']:,.1f} | {prog:+.2%} | {s['training']['preemptions']} | "
            f"{s['actions']['migrate']} | {s['actions']['power_limit']} | {s['thermal']['max_temperature_c']:.1f} | "
            f"{_ms(s['controller']['reconcile_p50_ms'])} / {_ms(s['controller']['reconcile_p99_ms'])} |")
    ours = rows["gputide"]
    cut = 1 - ours["thermal"]["gpu_seconds_above_slowdown"] / max(base["thermal"]["gpu_seconds_above_slowdown"], 1e-9)
    ok = (cut >= 0.9 and ours["inference"]["slo_attainment"] >= base["inference"]["slo_attainment"]
          and abs(ours["training"]["progress"] / base["training"]["progress"] - 1) <= 0.02)
    lines += ["", f"Targets (>= 90% cut, SLO no worse, training within 2%): **{'met' if ok else 'NOT met'}**.", ""]
    lines += ["| fleet | workloads | plan() median (ms) | naive baseline (ms) | speed-up | actions |",
              "|---|---|---|---|---|---|"]
    for n, reps in ((1000, 15), (10000, 7)):
        fast, slow, actions = time_plan(n, reps)
        lines.append(f"| {n:,} GPUs | {n * 2:,} | {fast:.1f} | {slow:.1f} | {slow / fast:.1f}x | "
                     f"{actions} |")
    lines += ["", "plan() includes hysteresis update, proposals, and simulating every proposal on a projection; the "
              "naive baseline only detects and searches targets. Target: 10,000 GPUs / 20,000 workloads < 100 ms "
              f"median on 2 cores (this machine: {_cpus()} CPUs).", ""]
    return "\n".join(lines)


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


if __name__ == "__main__":
    text = main()
    out = Path(__file__).parent / "results" / "loop.md"
    out.parent.mkdir(exist_ok=True)
    out.write_text(text + "\n")
    sys.stdout.write(text + "\n")
