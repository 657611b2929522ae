"""Simulator throughput: a simulated week of 256 GPUs at 60 s steps, and steps/s at 256 and 8,192 GPUs.

Baseline (same run): the same power/clock/thermal equations written the obvious way, one Python object per GPU
updated in a loop (`NaiveGpu`). Its results are checked against the vectorised `physics.step` so the ratio
compares equal work. The full `SimCluster.step` also runs the workload models, scheduling and accounting.

    .venv/bin/python -m bench.bench_sim
"""

from __future__ import annotations

import math
import os
import time
from pathlib import Path

import numpy as np

from balancer.fleet import scaled_fleet
from balancer.sim import SimCluster, default_mix, physics

COMMAND = ".venv/bin/python -m bench.bench_sim"


class NaiveGpu:
    """One GPU as a Python object: the same equations as `balancer.sim.physics.step`, scalar by scalar."""

    def __init__(self, p: physics.GpuParams, i: int, inlet: float) -> None:
        self.idle, self.tdp = float(p.idle_w[i]), float(p.tdp_w[i])
        self.slow, self.r, self.tau = float(p.slowdown_c[i]), float(p.resistance[i]), float(p.tau_s[i])
        self.limit, self.inlet, self.t = self.tdp, inlet, inlet + self.r * self.idle
        self.power, self.clock, self.reasons = self.idle, 1.0, 0

    def step(self, sm: float, mem: float, dt: float, noise: float) -> None:
        decay = math.exp(-dt / self.tau)
        demand = self.idle + (self.tdp - self.idle) * (0.75 * sm + 0.25 * mem)
        dyn = max(demand - self.idle, 1e-9)
        p_th = ((self.slow - self.t * decay) / max(1 - decay, 1e-12) - self.inlet) / self.r
        capped = demand > self.limit
        thermal = demand > p_th and p_th < self.limit
        clock = 1.0
        if capped or thermal:
            clock = min(max((min(self.limit, p_th) - self.idle) / dyn, 0.0), 1.0) ** (1 / 3)
        hw = (thermal and clock < physics.MIN_CLOCK) or self.t >= self.slow + physics.HW_SLOWDOWN_MARGIN_C
        clock = max(clock, physics.MIN_CLOCK)
        if hw:
            clock = physics.HW_CLOCK
        self.power = self.idle + dyn * clock**3
        target = self.inlet + self.r * self.power
        self.t = target + (self.t - target) * decay + noise
        self.clock = clock
        self.reasons = (0x4 if capped and not thermal else 0) | (0x20 if thermal or self.t >= self.slow else 0) | \
            (0x40 if hw else 0)


def _physics_inputs(n: int, seed: int = 0):
    fleet = scaled_fleet(n)
    p = physics.GpuParams.from_fleet(fleet)
    rng = np.random.default_rng(seed)
    sm, mem = rng.uniform(0.2, 1.0, fleet.n_gpus), rng.uniform(0.1, 0.8, fleet.n_gpus)
    inlet = p.node_inlet_c[p.node_index] + rng.uniform(0, 20, fleet.n_gpus)
    return fleet, p, sm, mem, inlet


def physics_rates(n: int, steps: int) -> tuple[float, float, float]:
    """(vectorised steps/s, naive steps/s, max |temperature difference| after `steps`)."""
    fleet, p, sm, mem, inlet = _physics_inputs(n)
    n = fleet.n_gpus
    noise = np.zeros(n)
    t = inlet + p.resistance * p.idle_w
    busy, online = np.ones(n, dtype=bool), np.ones(n, dtype=bool)
    t0 = time.perf_counter()
    for _ in range(steps):
        out = physics.step(p, temperature_c=t, inlet_c=inlet, resistance=p.resistance, power_limit_w=p.tdp_w,
                           sm=sm, mem=mem, busy=busy, online=online, dt=60.0, noise=noise)
        t = out.temperature_c
    vec = steps / (time.perf_counter() - t0)
    gpus = [NaiveGpu(p, i, float(inlet[i])) for i in range(n)]
    sm_l, mem_l = sm.tolist(), mem.tolist()
    t0 = time.perf_counter()
    for _ in range(steps):
        for i, g in enumerate(gpus):
            g.step(sm_l[i], mem_l[i], 60.0, 0.0)
    naive = steps / (time.perf_counter() - t0)
    diff = float(np.max(np.abs(np.array([g.t for g in gpus]) - t)))
    return vec, naive, diff


def cluster_rate(n: int, steps: int) -> tuple[float, int]:
    sim = SimCluster(scaled_fleet(n), seed=0)
    default_mix(sim)
    sim.step()
    t0 = time.perf_counter()
    for _ in range(steps):
        sim.step()
    return steps / (time.perf_counter() - t0), sim.n_gpus


def week_256() -> tuple[float, dict]:
    sim = SimCluster(scaled_fleet(256), seed=0)
    default_mix(sim)
    t0 = time.perf_counter()
    sim.advance_to(7 * 86400)
    return time.perf_counter() - t0, sim.stats()


def main() -> str:
    week_s, stats = week_256()
    rows = []
    for n, steps, naive_steps in ((256, 2000, 200), (8192, 300, 5)):
        rate, gpus = cluster_rate(n, steps)
        vec, naive, diff = physics_rates(n, naive_steps)
        rows.append((gpus, rate, vec, naive, diff))
    lines = [
        "## Simulator (balancer.sim)",
        "",
        f"A simulated week of a 256-GPU fleet (demo model mix, default workload mix, 60 s steps, 10,080 steps): "
        f"**{week_s:.2f} s** wall (target < 10 s; {10080 / week_s:,.0f} steps/s; "
        f"{stats['energy_kwh']:,.0f} kWh simulated, mean SM activity {stats['sm_active_mean']:.2f}).",
        "",
        "| GPUs | SimCluster.step (full model) steps/s | physics only, vectorised steps/s | physics, per-GPU "
        "object loop steps/s (baseline) | vectorised / loop | max temp. difference (°C) |",
        "|---:|---:|---:|---:|---:|---:|",
    ]
    for gpus, rate, vec, naive, diff in rows:
        lines.append(f"| {gpus:,} | {rate:,.0f} | {vec:,.0f} | {naive:,.1f} | {vec / naive:,.0f}x | {diff:.1e} |")
    lines += ["", "The baseline computes the same equations per GPU in Python; the last column checks both agree.",
              f"Machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the end of the run "
              "(other work on the machine slows every figure alike).", "", f"Command: `{COMMAND}`", ""]
    return "\n".join(lines)


if __name__ == "__main__":
    text = main()
    out = Path(__file__).resolve().parent / "results"
    out.mkdir(exist_ok=True)
    (out / "sim.md").write_text(text)
    print(text)
