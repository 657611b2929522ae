"""Plots of a simulation run's time series (matplotlib, Agg backend: no display needed)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

PANELS = (
    ("temperature_max_c", "hottest GPU (C)"),
    ("gpus_at_slowdown", "GPUs at slowdown"),
    ("throttled_gpus", "GPUs power-capped"),
    ("p99_over_slo_max", "worst p99 / SLO"),
    ("allocated_gpus", "GPUs allocated"),
    ("power_kw", "fleet power (kW)"),
)


def plot_timeseries(rows: Sequence[dict], out_dir: str | Path, *, title: str = "") -> Path:
    path = Path(out_dir) / "timeseries.png"
    fig, axes = plt.subplots(len(PANELS), 1, figsize=(10, 2.0 * len(PANELS)), sharex=True)
    hours = [(r["time"] - rows[0]["time"]) / 3600.0 for r in rows] if rows else []
    for ax, (key, label) in zip(axes, PANELS, strict=True):
        ax.plot(hours, [r[key] for r in rows], lw=1.0)
        ax.set_ylabel(label, fontsize=8)
        ax.grid(alpha=0.3)
    axes[-1].set_xlabel("simulated hours")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=80)
    plt.close(fig)
    return path
