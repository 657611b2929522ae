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
from matplotlib.ticker import LogLocator, NullFormatter, StrMethodFormatter  # noqa: E402

from balancer.app.plots import mark_scale  # noqa: E402
from balancer.dashboards_render import PromClient  # noqa: E402
from balancer.fleet import Fleet  # noqa: E402

NO_DATA = "no data"


def _dt(times: np.ndarray) -> np.ndarray:
    return (np.asarray(times, dtype=float) * 1000.0).round().astype("int64").astype("datetime64[ms]")


def _no_data(ax: Any, what: str) -> None:
    """Say so on the axes, in the figure, instead of leaving a blank panel that reads as 'all quiet'."""
    ax.text(0.5, 0.5, f"{NO_DATA}: {what}", transform=ax.transAxes, ha="center", va="center", fontsize=11,
            color="tab:red")


def temperature_grid(series: Sequence[Any], fleet: Fleet, start: float, end: float, step: float) -> np.ndarray:
    """GPUs (fleet order) x steps from `start` to `end` inclusive; NaN where Prometheus had no sample."""
    order = {g.uuid: g.index for g in fleet.gpus}
    n = int(round((end - start) / step)) + 1
    grid = np.full((fleet.n_gpus, n), np.nan)
    for s in series:
        row = order.get(s.labels.get("UUID", ""))
        if row is None:
            continue
        cols = ((np.asarray(s.times, float) - start) / step).round().astype(int)
        keep = (cols >= 0) & (cols < n)   # a sample outside the window is dropped, not piled onto its edge
        grid[row, cols[keep]] = np.asarray(s.values, float)[keep]
    return grid


def temperature_timeline(prom_url: str, fleet: Fleet, start: float, end: float, out: Path, *,
                         fault_wall: float, fault_node: str, actions: Sequence[Mapping[str, Any]],
                         outage: tuple[float, float], cycle_note: str = "") -> Path:
    """GPUs x time heatmap of temperature with the fault, the controller's actions and the outage marked."""
    step = 2
    grid = temperature_grid(PromClient(prom_url).query_range("gpu:temperature:celsius", start, end, step), fleet,
                            start, end, step)
    fig = timeline_figure(grid, fleet, start, step, fault_wall=fault_wall,
                          fault_node=fault_node, action_walls=[a["wall"] for a in actions], outage=outage,
                          cycle_note=cycle_note)
    path = out / "fleet_temperature_timeline.png"
    fig.savefig(path, dpi=100)
    return path


def timeline_figure(grid: np.ndarray, fleet: Fleet, start: float, step: float, *, fault_wall: float,
                    fault_node: str, action_walls: Sequence[float], outage: tuple[float, float],
                    cycle_note: str = "") -> Figure:
    """The heatmap of `temperature_grid` (column k is the sample at start + k * step, drawn centred on that time);
    the marks are explained in a legend under the axes, not written over the data or the tick labels."""
    from matplotlib import patheffects
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    fig = Figure(figsize=(12, 6.5), layout="constrained")
    ax = fig.add_subplot()
    half = step / 2.0 / 86400.0   # matplotlib date units are days
    t0, t1 = mdates.date2num(_dt([start, start + (grid.shape[1] - 1) * step]))
    im = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="turbo", vmin=30, vmax=95,
                   extent=(t0 - half, t1 + half, fleet.n_gpus - 0.5, -0.5))
    ax.xaxis_date()
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M:%S"))
    ax.set_xlabel("wall-clock time (UTC)" + (f"; {cycle_note}" if cycle_note else ""))
    fig.colorbar(im, ax=ax, label="GPU temperature (°C)")
    if not np.isfinite(grid).any():
        _no_data(ax, "no gpu:temperature:celsius sample in Prometheus for this window")
    outline = [patheffects.withStroke(linewidth=3, foreground="black")]
    handles = [Patch(facecolor="white", edgecolor="grey", label="no sample")]
    if fault_wall:
        ax.axvline(mdates.date2num(_dt([fault_wall]))[0], color="white", ls="--", lw=1.5, path_effects=outline)
        handles.append(Line2D([], [], color="white", ls="--", lw=1.5, path_effects=outline,
                              label=f"cooling fault on {fault_node}"))
    if outage[0] and outage[1]:
        a, b = mdates.date2num(_dt(list(outage)))
        ax.axvspan(a, b, color="grey", alpha=0.5)
        handles.append(Patch(facecolor="grey", alpha=0.5, label="exporter down: the controller holds still"))
    if len(action_walls):
        xs = mdates.date2num(_dt(list(action_walls)))
        ax.plot(xs, np.full(len(xs), -0.5), ls="none", marker="v", color="black", ms=5, clip_on=False)
        handles.append(Line2D([], [], ls="none", marker="v", color="black", label="a controller action"))
    nodes = [n.name for n in fleet.nodes]
    rows = {n: [g.index for g in fleet.gpus if g.node == n] for n in nodes}
    nodes = [n for n in nodes if rows[n]]
    ax.set_yticks([(min(rows[n]) + max(rows[n])) / 2 for n in nodes], nodes, fontsize=6)
    for label in ax.get_yticklabels():
        if label.get_text() == fault_node:
            label.set_color("tab:red")
            label.set_fontweight("bold")
    ax.set_ylabel("GPU (grouped by node)")
    ax.set_title("Fleet temperature read back from Prometheus", pad=12)   # room for the action marks
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    return fig


def node_grids(fleet: Fleet, frames: Mapping[str, np.ndarray], out: Path, *, slowdown: np.ndarray,
               highlight: str = "") -> Path:
    """Node x GPU temperature grids side by side (e.g. before the fault, at its peak, after gputide acted);
    `highlight`'s name in red, as on the timeline."""
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
    first = np.atleast_1d(axes)[0]
    first.set_yticks(range(len(nodes)), nodes, fontsize=6)
    first.set_ylabel("node")
    for label in first.get_yticklabels():
        if label.get_text() == highlight:
            label.set_color("tab:red")
            label.set_fontweight("bold")
    fig.colorbar(im, ax=axes, label="°C (x = at or above slowdown temperature)")
    path = out / "fleet_grid_before_after.png"
    fig.savefig(path, dpi=100)
    return path


def forecast_vs_actual(actual: Any, forecast: Mapping[float, Any], out: Path, *, title: str,
                       name: str = "forecast_vs_actual.png") -> Path:
    """`actual`: a pandas Series; `forecast`: quantile -> Series on the same index (p50 line, p10-p90 band, or
    p50-p90 without a p10). A timestamp that repeats (the backtest's forecasts aimed past the trace's end all sit
    on its last step) keeps its first row only, so the plot does not end in a vertical streak."""
    keep = ~actual.index.duplicated(keep="first")
    actual = actual[keep]
    forecast = {q: f[keep] for q, f in forecast.items()}
    fig = Figure(figsize=(12, 4.4), layout="constrained")
    ax = fig.add_subplot()
    ax.plot(actual.index, actual.to_numpy(), color="black", lw=0.8, label="actual demand")
    p50, lo, hi = forecast.get(0.5), forecast.get(0.1), forecast.get(0.9)
    if p50 is not None:
        ax.plot(p50.index, p50.to_numpy(), color="tab:blue", lw=1.0, label="forecast p50")
    base = lo if lo is not None else p50
    if hi is not None and base is not None:
        y, top = actual.to_numpy(float), hi.to_numpy(float)
        ok = np.isfinite(y) & np.isfinite(top)
        below = f"; actual at or below p90 {np.mean(y[ok] <= top[ok]):.1%} of the time" if ok.any() else ""
        ax.fill_between(hi.index, base.to_numpy(), top, color="tab:blue", alpha=0.25,
                        label=("p10-p90" if lo is not None else "p50-p90") + below)
    if not np.isfinite(actual.to_numpy(float)).any():
        _no_data(ax, "no actual demand in the scored window")
    tz = getattr(actual.index, "tz", None)
    ax.set_xlabel(f"time forecast for ({tz or 'UTC'})")
    ax.set_ylabel("requests / s")
    ax.set_title(title)
    ax.legend(loc="upper left", fontsize=8)
    path = out / name
    fig.savefig(path, dpi=100)
    return path


def capacity_split(runs: Mapping[str, Any], out: Path, *, inference_cols: Sequence[str],
                   training_cols: Sequence[str], time_col: str = "time") -> Path:
    """Stacked inference / training GPUs over the run, one panel per policy (`runs`: name -> DataFrame with
    `time_col` in epoch seconds: the trace's own clock, so nights and peaks fall where they did). Panels share
    both axes so the policies compare at a glance; each names its mean GPUs, as the tables' GPU-hours do."""
    fig = Figure(figsize=(12, 2.4 * len(runs) + 0.6), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(runs), 1, sharex=True, sharey=True))
    for ax, (name, df) in zip(axes, runs.items()):
        missing = [c for c in (time_col, *inference_cols, *training_cols) if c not in df]
        if missing:
            raise KeyError(f"{name}: no column {', '.join(missing)} in its time series")
        x = _dt(df[time_col].to_numpy(float))
        inf = np.sum([df[c].to_numpy(float) for c in inference_cols], axis=0)
        train = np.sum([df[c].to_numpy(float) for c in training_cols], axis=0)
        if len(df):
            ax.stackplot(x, inf, train, colors=["tab:orange", "tab:green"], alpha=0.85)
            ax.set_title(f"{name}: inference {np.mean(inf):.0f} GPUs, training {np.mean(train):.0f} GPUs on "
                         f"average", fontsize=10, loc="left")
        else:
            ax.set_title(name, fontsize=10, loc="left")
            _no_data(ax, "an empty time series")
        ax.set_ylabel("GPUs")
        ax.grid(alpha=0.3)
    axes[-1].xaxis.set_major_formatter(mdates.DateFormatter("%a %H:%M"))
    spans = [df[time_col].to_numpy(float) for df in runs.values() if len(df)]
    window = ""
    if spans:
        first, last = _dt([min(t.min() for t in spans), max(t.max() for t in spans)]).astype("datetime64[m]")
        window = f": {str(first).replace('T', ' ')} to {str(last).replace('T', ' ')}"
    axes[-1].set_xlabel(f"time (UTC, the trace's clock{window})")
    fig.suptitle("GPUs held by inference (orange) and lent to training (green), per policy", fontsize=11)
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(color="tab:orange", alpha=0.85, label="inference GPUs"),
                        Patch(color="tab:green", alpha=0.85, label="training GPUs")],
               loc="outside upper right", ncols=2, fontsize=8, frameon=False)
    path = out / "capacity_split.png"
    fig.savefig(path, dpi=100)
    return path


def policy_timeseries(runs: Mapping[str, Any], panels: Sequence[tuple[str, str]], out: Path, *, name: str,
                      title: str, origin: float, events: Sequence[tuple[float, str]] = ()) -> Path:
    """Each policy's time series overlaid on shared axes, one panel per (column, label), in hours since `origin`
    (the simulation's start, epoch seconds), with `events` (epoch seconds, what) marked: the separate per-policy
    plots scale each panel to its own data, so two of them do not compare by eye."""
    events = [((at - origin) / 3600.0, what) for at, what in events]
    fig = Figure(figsize=(11, 1.9 * len(panels) + 0.8), layout="constrained")
    axes = np.atleast_1d(fig.subplots(len(panels), 1, sharex=True))
    for ax, (col, label) in zip(axes, panels):
        drawn = 0
        for policy, df in runs.items():
            if col in df and len(df):
                hours = (df["time"].to_numpy(float) - origin) / 3600.0
                ax.plot(hours, df[col].to_numpy(float), lw=1.0, label=policy)
                drawn += 1
        if not drawn:
            _no_data(ax, f"no column {col}")
        mark_scale(ax, col, [df[col].to_numpy(float) for df in runs.values() if col in df and len(df)])
        for at, _what in events:
            ax.axvline(at, color="tab:red", ls=":", lw=1)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8, loc="upper left")
    axes[-1].set_xlabel("simulated hours" + "".join(f"; dotted red at {at:g} h: {what}" for at, what in events))
    fig.suptitle(title)
    path = out / name
    fig.savefig(path, dpi=90)
    return path


def placement_curves(curves: Mapping[str, tuple[Sequence[float], Sequence[float]]], out: Path) -> Path:
    """Unallocated GPU % against arrived workload (% of capacity), one line per policy."""
    fig = Figure(figsize=(9, 4), layout="constrained")
    ax = fig.add_subplot()
    shown = {k: (np.asarray(lv, float), np.asarray(u, float)) for k, (lv, u) in curves.items() if len(lv)}
    for name, (levels, unalloc) in shown.items():
        at100 = float(np.interp(100.0, levels, unalloc))   # the table's figure, read off the same curve
        ax.plot(levels, unalloc, label=f"{name}: {at100:.2f}% at 100%", lw=1.2)
    if shown:
        # the y range fits what is drawn from 60% on (the curves start at 100% unallocated at 0% arrived)
        top = max(float(u[lv >= 60].max(initial=0.0)) for lv, u in shown.values())
        ax.set_xlim(60, max(float(lv.max()) for lv, _ in shown.values()))
        ax.set_ylim(0, max(40.0, top))
        ax.legend(fontsize=8)
    else:
        _no_data(ax, "no placement run")
    ax.axvline(100, color="grey", ls=":")
    ax.set_title("GPUs left unallocated as pods arrive (lower is better)", fontsize=10)
    ax.set_xlabel("arrived GPU requests (% of cluster capacity)")
    ax.set_ylabel("unallocated GPUs (% of the cluster's)")
    path = out / "placement_unallocated.png"
    fig.savefig(path, dpi=100)
    return path


def calibration_curves(fits: Mapping[str, tuple[np.ndarray, np.ndarray, Any]], slo_s: float, out: Path) -> Path:
    """Per service: observed (load per replica, p99) samples, the isotonic fit and the calibrated rpsPerReplica
    (`fits`: name -> (load, p99, balancer.plan.calibration.Calibration))."""
    n = len(fits)
    cols = max(min(n, 2), 1)
    rows = max((n + cols - 1) // cols, 1)
    fig = Figure(figsize=(6 * cols, 3.4 * rows), layout="constrained")
    axes = np.atleast_1d(fig.subplots(rows, cols, squeeze=False)).ravel()
    if not n:
        _no_data(axes[0], "no service history to calibrate on")
        n = 1
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
        # 0.5, 1, 2, 5 s...: a p99 range of under a decade had one labelled tick (1.0) with decades alone
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        ax.yaxis.set_major_formatter(StrMethodFormatter("{x:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
        ax.set_title(name, fontsize=10, loc="left")
        ax.set_xlabel("load per replica (req/s)")
        ax.set_ylabel(f"p99 latency (s, drawn at most {4 * slo_s:g})")
        ax.legend(fontsize=7, loc="upper left")
    for ax in axes[n:]:
        ax.set_visible(False)
    path = out / "calibration.png"
    fig.savefig(path, dpi=100)
    return path
