"""Tidal capacity shifting: static vs reactive vs gputide on 7 days of ServeGen m-small, measured in one run.

    .venv/bin/python -m bench.bench_tidal

Targets (issue 6): gputide SLO attainment >= 0.999 and not below static's; training progress >= 1.4 x static's;
SLO-violating requests <= 0.5 x reactive's. Writes bench/results/tidal.md and returns the markdown section.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

from balancer.app import scenarios, tidal

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python -m bench.bench_tidal"
POLICIES = ("static", "reactive", "gputide")


def trace_path() -> Path:
    shared = Path(os.environ.get("GPUTIDE_SHARED_DATA", ROOT.parent / "shared" / "data"))
    path = shared / "servegen-language" / "m-small"
    return path if path.is_dir() else tidal.DEFAULT_TRACE


def run(days: float = 7.0) -> dict[str, dict]:
    out = {}
    with tempfile.TemporaryDirectory() as tmp:
        for policy in POLICIES:
            t0 = time.perf_counter()
            sim, events, d = scenarios.build("tidal", days=days, trace=str(trace_path()))
            summary = scenarios.run_simulation(sim, policy, d, 60.0, Path(tmp) / policy, events=events,
                                               scenario="tidal", plots=False)
            summary = tidal.tidal_summary(sim, summary)
            summary["wall_s"] = time.perf_counter() - t0
            out[policy] = summary
    return out


def main() -> str:
    res = run()
    gt = res["gputide"]
    att = {p: r["inference"]["slo_attainment"] for p, r in res.items()}
    prog = {p: r["training"]["progress"] for p, r in res.items()}
    viol = {p: r["inference"]["slo_violating_requests"] for p, r in res.items()}
    ratio_prog = prog["gputide"] / max(prog["static"], 1e-9)
    ratio_viol = viol["gputide"] / max(viol["reactive"], 1e-9)
    checks = [
        ("gputide SLO attainment >= 0.999", att["gputide"] >= 0.999, f"{att['gputide']:.5f}"),
        ("gputide SLO attainment >= static's (strict)", att["gputide"] >= att["static"],
         f"{att['gputide']:.10f} vs {att['static']:.10f}"),
        ("gputide SLO attainment >= static's (to 6 decimals)", round(att["gputide"], 6) >= round(att["static"], 6),
         f"{viol['gputide']:,.1f} vs {viol['static']:,.1f} violating requests"),
        ("training progress >= 1.4 x static", ratio_prog >= 1.4, f"{ratio_prog:.2f}x"),
        ("SLO-violating requests <= 0.5 x reactive", ratio_viol <= 0.5, f"{ratio_viol:.3f}x"),
    ]
    info = gt.get("tidal", {})
    lines = [
        "## Tidal capacity shifting (static vs reactive vs gputide)",
        "",
        f"7 simulated days of ServeGen m-small (window from {info.get('window_start', '?')}, "
        f"{info.get('history_days', 0):.0f} days before it as forecast history) on the 256-GPU demo fleet, "
        f"60 s steps; {info.get('statement', '')}. Measured in one run.",
        "",
        "| policy | SLO attainment | SLO-violating requests | training progress (A100 GPU-h) | preemptions | "
        "lost work (GPU-h) | mean inference / training / loaned GPUs | wall s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for p in POLICIES:
        r = res[p]
        cap = r.get("capacity_gpus_mean", {})
        lines.append(
            f"| {p} | {att[p]:.6f} | {viol[p]:,.0f} | {prog[p]:,.0f} | {r['training']['preemptions']} | "
            f"{r['training']['lost_work_gpu_hours']:.1f} | {cap.get('inference', 0):.0f} / "
            f"{cap.get('training', 0):.0f} / {cap.get('loaned', 0):.0f} | {r['wall_s']:.0f} |")
    lines += ["", "| target | result | pass |", "|---|---|---|"]
    lines += [f"| {name} | {value} | {'PASS' if ok else 'FAIL'} |" for name, ok, value in checks]
    lines += ["", f"Command: `{COMMAND}`", ""]
    text = "\n".join(lines)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "tidal.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main())
