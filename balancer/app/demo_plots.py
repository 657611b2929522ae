"""Plots for the demo report (matplotlib, Agg): fleet heatmaps, forecast vs actual, capacity split.

The fleet heatmap over time is read back from the real Prometheus the demo ran (`gpu:temperature:celsius`,
one row per GPU in fleet order, one column per step), so it shows exactly what an operator would have seen.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.dates as mdates  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from balancer.dashboards_render import PromClient  # noqa: E402
from balancer.fleet import Fleet  # noqa: E402


def _dt(times: np.ndarray) -> np.ndarray:
    return np.asarray(times, dtype=float).round().astype("int64").astype("datetime64[s]")


def temperature_timeline(prom_url: str, fleet: Fleet, start: float, end: float, out: Path, *,
                         fault_wall: float, fault_node: str, actions: Sequence[Mapping[str, Any]],
                         outage: tuple[float, float]) -> Path:
    """GPUs x time heatmap of temperature with the fault, the controller's actions and the outage marked."""
    step = 2
    series = PromClient(prom_url).query_range("gpu:temperature:celsius", start, end, step)
    order = {g.uuid: g.index for g in fleet.gpus}
    times = np.arange(start, end + step, step)
    grid = np.full((fleet.n_gpus, len(times)), np.nan)
    for s in series:
        row = order.get(s.labels.get("UUID", ""))
        if row is None:
            continue
        cols = np.clip(((s.times - start) / step).round().astype(int), 0, len(times) - 1)
        grid[row, cols] = s.values
    fig = Figure(figsize=(12, 5.5), layout="constrained")
    ax = fig.add_subplot()
    t0, t1 = mdates.date2num(_dt([start, end]))
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="turbo", vmin=30, vmax=95,
                   extent=(t0, t1, fleet.n_gpus - 0.5, -0.5))
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    fig.colorbar(im, ax=ax, label="GPU temperature (°C)")
    node_rows = [g.index for g in fleet.gpus if g.node == fault_node]
    ax.axhspan(min(node_rows) - 0.5, max(node_rows) + 0.5, color="white", alpha=0.12)
    ax.axvline(mdates.date2num(_dt([fault_wall]))[0], color="white", ls="--", lw=1.5)
    ax.text(mdates.date2num(_dt([fault_wall]))[0], -2, f" cooling fault on {fault_node}", color="black", fontsize=8)
    if outage[0] and outage[1]:
        a, b = mdates.date2num(_dt(list(outage)))
        ax.axvspan(a, b, color="grey", alpha=0.5)
        ax.text(a, fleet.n_gpus + 6, " exporter down: controller holds still", fontsize=8)
    for act in actions:
        x = mdates.date2num(_dt([act["wall"]]))[0]
        ax.plot([x], [-1.5], marker="v", color="black", ms=4, clip_on=False)
    labels = sorted({g.node for g in fleet.gpus}, key=lambda n: order[next(g.uuid for g in fleet.gpus if g.node == n)])
    ticks = [next(g.index for g in fleet.gpus if g.node == n) for n in labels]
    ax.set_yticks(ticks, labels, fontsize=5)
    ax.set_ylabel("GPU (grouped by node)")
    ax.set_title("Fleet temperature from Prometheus (▼ = a controller action)")
    path = out / "fleet_temperature_timeline.png"
    fig.savefig(path, dpi=100)
    return path


def node_grids(fleet: Fleet, frames: Mapping[str, np.ndarray], out: Path, *, slowdown: np.ndarray) -> Path:
    """Node x GPU temperature grids side by side (e.g. before the fault, at its peak, after gputide acted)."""
    nodes = [n.name for n in fleet.nodes]
    width = max(n.gpu_count for n in fleet.nodes)
    fig = Figure(figsize=(4.2 * len(frames), 7), layout="constrained")
    axes = fig.subplots(1, len(frames), sharey=True)
    im = None
    for ax, (title, temps) in zip(np.atleast_1d(axes), frames.items()):
        grid = np.full((len(nodes), width), np.nan)
        above = np.zeros_like(grid, dtype=bool)
        for g in fleet.gpus:
            grid[nodes.index(g.node), g.slot] = temps[g.index]
            above[nodes.index(g.node), g.slot] = temps[g.index] >= slowdown[g.index]
        im = ax.imshow(grid, cmap="turbo", vmin=30, vmax=95, aspect="auto", interpolation="nearest")
        ys, xs = np.nonzero(above)
        ax.scatter(xs, ys, marker="x", color="white", s=14, linewidths=1)
        ax.set_title(f"{title}\n{int(above.sum())} GPUs at/above slowdown", fontsize=10)
        ax.set_xticks(range(width))
        ax.set_xlabel("GPU")
    np.atleast_1d(axes)[0].set_yticks(range(len(nodes)), nodes, fontsize=6)
    fig.colorbar(im, ax=axes, label="°C (x = at or above slowdown temperature)")
    path = out / "fleet_grid_before_after.png"
    fig.savefig(path, dpi=100)
    return path


def forecast_vs_actual(actual: Any, forecast: Mapping[float, Any], out: Path, *, title: str,
                       name: str = "forecast_vs_actual.png") -> Path:
    """`actual`: a pandas Series; `forecast`: quantile -> Series on the same index (p50 line, p10-p90 band)."""
    fig = Figure(figsize=(12, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(actual.index, actual.to_numpy(), color="black", lw=0.8, label="actual demand")
    if 0.5 in forecast:
        ax.plot(forecast[0.5].index, forecast[0.5].to_numpy(), color="tab:blue", lw=1.0, label="forecast p50")
    lo, hi = forecast.get(0.1), forecast.get(0.9)
    if hi is not None:
        base = lo.to_numpy() if lo is not None else forecast[0.5].to_numpy()
        ax.fill_between(hi.index, base, hi.to_numpy(), color="tab:blue", alpha=0.25,
                        label="p10-p90" if lo is not None else "p50-p90")
    ax.set_ylabel("requests / s")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    path = out / name
    fig.savefig(path, dpi=100)
    return path


def capacity_split(runs: Mapping[str, Any], out: Path, *, inference_cols: Sequence[str],
                   training_cols: Sequence[str], hours_col: str = "hours") -> Path:
    """Stacked inference / training GPUs over the days, one panel per policy (`runs`: name -> DataFrame)."""
    fig = Figure(figsize=(12, 2.6 * len(runs)), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(runs), 1, sharex=True))
    for ax, (name, df) in zip(axes, runs.items()):
        x = df[hours_col].to_numpy() / 24.0
        inf = sum(df[c].to_numpy() for c in inference_cols)
        train = sum(df[c].to_numpy() for c in training_cols)
        ax.stackplot(x, inf, train, labels=["inference GPUs", "training GPUs"], colors=["tab:orange", "tab:green"],
                     alpha=0.85)
        ax.set_ylabel("GPUs")
        ax.set_title(name, fontsize=10, loc="left")
        ax.legend(loc="upper right", fontsize=7)
    axes[-1].set_xlabel("day")
    path = out / "capacity_split.png"
    fig.savefig(path, dpi=100)
    return path


def placement_curves(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], out: Path) -> Path:
    """Unallocated GPU % against arrived workload (% of capacity), one line per policy."""
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    for name, (levels, unalloc) in curves.items():
        ax.plot(levels, unalloc, label=name, lw=1.2)
    ax.set_xlim(60, max(max(lv) for lv, _ in curves.values()))
    ax.set_ylim(0, 40)
    ax.axvline(100, color="grey", ls=":")
    ax.set_xlabel("arrived GPU requests (% of cluster capacity)")
    ax.set_ylabel("unallocated GPUs (%)")
    ax.legend(fontsize=8)
    path = out / "placement_unallocated.png"
    fig.savefig(path, dpi=100)
    return path


def calibration_curves(fits: Mapping[str, tuple[np.ndarray, np.ndarray, Any]], slo_s: float, out: Path) -> Path:
    """Per service: observed (load per replica, p99) samples, the isotonic fit and the calibrated rpsPerReplica
    (`fits`: name -> (load, p99, balancer.plan.calibration.Calibration))."""
    n = len(fits)
    cols = min(n, 2)
    rows = (n + cols - 1) // cols
    fig = Figure(figsize=(6 * cols, 3.4 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    for ax, (name, (load, p99, cal)) in zip(axes, fits.items()):
        ax.scatter(load, np.minimum(p99, 4 * slo_s), s=6, alpha=0.4, color="tab:blue", label="samples")
        if cal.curve:
            kx, ky = zip(*cal.curve)
            ax.plot(kx, np.minimum(ky, 4 * slo_s), color="tab:red", lw=1.5, label="isotonic fit")
        ax.axhline(slo_s, color="grey", ls=":", label=f"SLO {slo_s:g} s")
        if cal.rps_per_replica is not None:
            ax.axvline(cal.rps_per_replica, color="tab:green", ls="--",
                       label=f"rpsPerReplica {cal.rps_per_replica:.1f} ({cal.bound})")
        ax.set_yscale("log")
        ax.set_title(name, fontsize=10, loc="left")
        ax.set_xlabel("load per replica (req/s)")
        ax.set_ylabel("p99 latency (s)")
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[n:]:
        ax.set_visible(False)
    path = out / "calibration.png"
    fig.savefig(path, dpi=100)
    return path
