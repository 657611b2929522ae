"""The demo report's words and tables that come from numbers (pure: no I/O), so that what the text claims is
what the run measured and the tables agree with the figures beside them."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from balancer.app.report import fmt


def hot_count(temps: np.ndarray | None, slowdown: np.ndarray) -> int:
    """GPUs at or above their slowdown temperature in one frame: the count each node-grid panel shows."""
    return 0 if temps is None else int(np.sum(np.asarray(temps) >= slowdown))


def celsius_below(temp_c: float) -> str:
    """A temperature to 0.1 °C, rounded down: set beside a slowdown threshold (89 °C) and a count of GPUs at or
    above it, a GPU at 88.97 °C printed as "89.0" read as at slowdown while the count said none was."""
    return f"{math.floor(temp_c * 10.0 + 1e-9) / 10.0:.1f}"


def live_rows(res: Any, slowdown: np.ndarray, kinds: Mapping[str, int]) -> list[list[Any]]:
    """The live section's table. "At the end" is counted on the frame the node grid draws as the end; the worst
    is the most GPUs at/above slowdown in any one cycle (the grid's middle frame is the moment the faulty node
    was hottest, which need not be the same cycle); the faulty node's hottest GPU shows how close it came."""
    node = [g.index for g in res.fleet.gpus if g.node == res.fault_node]
    frames = (res.temperature_before, res.temperature_peak, res.temperature_after)
    hottest = " / ".join("-" if t is None else celsius_below(float(np.asarray(t)[node].max())) for t in frames)
    return [
        [f"hottest GPU on {res.fault_node} (°C): before the fault / worst / end", hottest],
        [f"slowdown temperature of {res.fault_node}'s GPUs (°C)", float(np.min(slowdown[node]))],
        ["GPUs at/above slowdown, most in any one cycle", max(res.hot_gpu_cycles, default=0)],
        ["GPUs at/above slowdown at the end", hot_count(res.temperature_after, slowdown)],
        ["controller actions", ", ".join(f"{k}: {v}" for k, v in sorted(kinds.items())) or "none"],
        ["cycles held still (fail-static)", len(res.holds)],
        ["Prometheus alerts that fired", ", ".join(sorted(res.alerts_seen)) or "none"],
    ]


def outage_sentence(outage_cycles: int, holds: Sequence[Mapping[str, Any]]) -> str:
    """What the exporter outage showed, as measured (the held cycles may differ from the outage's length)."""
    if outage_cycles <= 0:
        return ""
    held = len(holds)
    what = ("the controller held still (fail-static) in all of them" if held >= outage_cycles else
            f"the controller held still (fail-static) in {held} of them" if held else
            "the controller did <b>not</b> hold still in any of them")
    return f" Later the exporter goes away for {outage_cycles} cycles (grey): {what}."


def trace_window(tidal: Mapping[str, Any]) -> str:
    """ " (2024-01-13 to 2024-01-15 UTC of the trace)" from a tidal summary's window_start and days: which part of
    the 14-day trace a shorter run replayed; "" where the summary does not say."""
    start, days = tidal.get("window_start"), tidal.get("days")
    if not start or not days:
        return ""
    first = datetime.fromisoformat(str(start))
    first = first.astimezone(UTC) if first.tzinfo else first.replace(tzinfo=UTC)
    last = first + timedelta(days=float(days))
    return f" ({first:%Y-%m-%d %H:%M} to {last:%Y-%m-%d %H:%M} UTC of the trace)"


def progress_ratio(progress: float, static: float) -> float | None:
    """Training progress relative to static's; None (shown as '-') when static made none to compare with."""
    return progress / static if static > 0 else None


def tidal_findings(results: Mapping[str, Mapping[str, Any]]) -> str:
    """One sentence per non-static policy from its summary: training progress vs static, SLO attainment,
    violating requests and preemptions, so the section's claims can be checked against its table."""
    parts = []
    for policy, res in results.items():
        if policy == "static":
            continue
        ratio = res.get("vs_static", {}).get("training_progress_ratio")
        inf, train = res.get("inference", {}), res.get("training", {})
        gain = "-" if ratio is None else f"{ratio:.2f}x"
        parts.append(f"<code>{policy}</code>: {gain} static's training progress, SLO attainment "
                     f"{fmt(inf.get('slo_attainment', '-'))} ({fmt(inf.get('slo_violating_requests', '-'))} "
                     f"SLO-violating requests), {fmt(train.get('preemptions', '-'))} training preemptions")
    if not parts:
        return ""
    static = results.get("static", {}).get("inference", {})
    return (f"In this run (static: SLO attainment {fmt(static.get('slo_attainment', '-'))}): "
            + "; ".join(parts) + ".")


def percent(share: float | None) -> str:
    """A share (0..1) as a person quotes it, "87.4%"; "-" where there is none (NaN, None)."""
    if share is None or not math.isfinite(share):
        return "-"
    return f"{100.0 * share:.1f}%"
