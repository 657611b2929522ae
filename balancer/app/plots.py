"""Plots of a simulation run's time series (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

PANELS = (
    ("temperature_max_c", "hottest GPU (°C)"),
    ("gpus_at_slowdown", "GPUs at slowdown"),
    ("throttled_gpus", "GPUs power-capped"),
    ("p99_over_slo_max", "worst p99 / SLO"),
    ("allocated_gpus", "GPUs allocated"),
    ("power_kw", "fleet power (kW)"),
)


def plot_timeseries(rows: Sequence[dict], out_dir: str | Path, *, title: str = "") -> Path:
    path = Path(out_dir) / "timeseries.png"
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(10, 2.0 * len(PANELS)), sharex=True)
    try:   # closed even when a row lacks a column: pyplot keeps every open figure until then
        hours = [(r["time"] - rows[0]["time"]) / 3600.0 for r in rows] if rows else []
        for ax, (key, label) in zip(axes, PANELS, strict=True):
            values = np.asarray([r[key] for r in rows], float)
            ax.plot(hours, values, lw=1.0)
            mark_scale(ax, key, [values])
            ax.set_ylabel(label, fontsize=8)
            ax.grid(alpha=0.3)
        if not rows:
            axes[0].text(0.5, 0.5, "no data: the run recorded no step", transform=axes[0].transAxes,
                         ha="center", va="center", color="tab:red")
        axes[-1].set_xlabel("simulated hours")
        fig.suptitle(title)
        fig.tight_layout()
        fig.savefig(path, dpi=80)
    finally:
        plt.close(fig)
    return path


def mark_scale(ax: Any, col: str, values: Sequence[np.ndarray]) -> None:
    """What a panel's scale needs to be read: whole-number ticks for a count (GPUs allocated ticked 54.25 GPUs) and,
    on a latency-over-SLO ratio, the line at 1 where the SLO is crossed (it was left for the reader to find)."""
    finite = [v[np.isfinite(v)] for v in values]
    if finite and all(np.array_equal(v, np.round(v)) for v in finite):
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    if "over_slo" in col:
        ax.axhline(1.0, color="grey", ls="--", lw=0.8)
        ax.text(0.995, 1.0, "p99 = SLO", transform=ax.get_yaxis_transform(), va="bottom", ha="right", fontsize=7,
                color="grey")
