"""Tidal capacity shifting: static vs reactive vs gputide, 7 simulated days, measured in one run per trace.

    .venv/bin/python -m bench.run_all --only tidal      (or .venv/bin/python -m bench.bench_tidal)

Traces: ServeGen m-small (the issue's target), ServeGen m-large (when ../shared/data has it) and a synthetic
sudden burst: m-small with its demand tripled, as a step, for one hour in the small hours of the fourth simulated
day (a burst larger than anything in the history). Targets (issue 6, on m-small): gputide SLO attainment >= 0.999
and not below static's; training progress >= 1.4 x static's; SLO-violating requests <= 0.5 x reactive's; and a
simulated week under 60 s. Writes bench/results/tidal.md and returns the markdown section.

Every trace is measured under both assumptions about the training jobs (`gputide simulate --scenario tidal
--checkpoint-on-sigterm none|all`): *lossy* (none checkpoints on SIGTERM: a shrink loses the work since the job's
last checkpoint, what gputide assumes of a Job without `gputide.io/checkpoint-on-sigterm: "true"`; the default) and
*checkpointed* (every job saves a checkpoint on SIGTERM within its grace period: a shrink loses nothing). The
targets are judged under both; the lossy row is the honest default.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path

import pandas as pd

from balancer.app import scenarios, tidal

ROOT = Path(__file__).resolve().parents[1]
COMMAND = ".venv/bin/python -m bench.run_all --only tidal"   # or the section alone: python -m bench.bench_tidal
POLICIES = ("static", "reactive", "gputide")
# gputide again with another capacity section, measured in the same run (row label, the section's changes): the
# SLO-first quantiles, which lend less (the defaults until 2026-12-05)
VARIANTS = (("gputide SLO-first", {"reclaim_quantile": 0.99, "keep_quantile": 0.99}),)
# (option value, row label, what it assumes); the first is the scenario's default
ASSUMPTIONS = (("none", "lossy", "no job checkpoints on SIGTERM: a shrink loses the work since its last checkpoint"),
               ("all", "checkpointed", "every job checkpoints on SIGTERM: a shrink loses nothing"))
BURST_FACTOR, BURST_DAY, BURST_HOUR = 3.0, 3, 3.0


def shared_trace(name: str) -> Path | None:
    shared = Path(os.environ.get("GPUTIDE_SHARED_DATA", ROOT.parent / "shared" / "data"))
    path = shared / "servegen-language" / name
    return path if path.is_dir() else None


def burst_trace(base: Path, out: Path, days: float = 7.0) -> Path:
    """`base` summed as the scenario reads it, with one hour of the simulated window multiplied by BURST_FACTOR."""
    y = tidal.load_trace(str(base))
    step = y.index[1] - y.index[0]
    start = y.index[len(y) - int(round(days * 86400 / step.total_seconds()))]
    t0 = start + pd.Timedelta(days=BURST_DAY, hours=BURST_HOUR)
    y = y.copy()
    y[(y.index >= t0) & (y.index < t0 + pd.Timedelta(hours=1))] *= BURST_FACTOR
    pd.DataFrame({"timestamp": [t.isoformat() for t in y.index], "value": y.to_numpy()}).to_csv(out, index=False)
    return out


SHIPPED_POLICY = ROOT / "deploy" / "components" / "capacity" / "policy.yaml"


def shipped_policy():
    """The BalancerPolicy the capacity overlay ships (its ConfigMap's policy.yaml): what gputide runs with."""
    import yaml

    from balancer import config

    doc = yaml.safe_load(SHIPPED_POLICY.read_text())
    return config.from_dict(yaml.safe_load(doc["data"]["policy.yaml"]), str(SHIPPED_POLICY))


def run(trace: Path, days: float = 7.0, checkpoint_on_sigterm: str = "none") -> dict[str, dict]:
    out = {}
    shipped = shipped_policy()
    runs = [(p, p, shipped) for p in POLICIES]
    runs += [(label, "gputide", shipped.with_section("capacity", **changes)) for label, changes in VARIANTS]
    with tempfile.TemporaryDirectory() as tmp:
        for k, (label, policy, policy_file) in enumerate(runs):
            t0, c0 = time.perf_counter(), time.process_time()
            sim, events, d = scenarios.build("tidal", days=days, trace=str(trace),
                                             setup_options={"checkpoint_on_sigterm": checkpoint_on_sigterm})
            summary = scenarios.run_simulation(sim, policy, d, 60.0, Path(tmp) / str(k), events=events,
                                               scenario="tidal", plots=False, policy=policy_file)
            summary["wall_s"] = time.perf_counter() - t0
            summary["cpu_s"] = time.process_time() - c0
            out[label] = summary
    return out


def run_both(trace: Path, days: float = 7.0) -> dict[str, dict[str, dict]]:
    """`run` under each assumption (ASSUMPTIONS), keyed by its row label."""
    return {label: run(trace, days, value) for value, label, _ in ASSUMPTIONS}


def section(title: str, both: dict[str, dict[str, dict]], strict_targets: bool) -> list[str]:
    info = next(iter(both.values()))["gputide"].get("tidal", {})
    lines = [f"### {title}", "", f"Window from {info.get('window_start', '?')} ({info.get('history_days', 0):.0f} "
             f"days before it as forecast history); {info.get('statement', '')}. Shrinks: "
             + "; ".join(f"*{label}*: {what} (`--checkpoint-on-sigterm {value}`)" for value, label, what in ASSUMPTIONS)
             + ". *gputide SLO-first*: gputide with `reclaimQuantile: 0.99` and `keepQuantile: 0.99` in the policy "
             "file's capacity section (the defaults until 2026-12-05), measured in the same run; the targets are "
             "judged on gputide's defaults.", "",
             "| policy | shrinks | SLO attainment | SLO-violating requests | training progress (A100 GPU-h) | "
             "training / static | preemptions | lost work (GPU-h) | mean inference / training / loaned GPUs | "
             "wall s | CPU s |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for _, label, _ in ASSUMPTIONS:
        res = both[label]
        static = max(res["static"]["training"]["progress"], 1e-9)
        for p in (*POLICIES, *(label for label, _ in VARIANTS)):
            r = res[p]
            cap = r.get("capacity_gpus_mean", {})
            lines.append(
                f"| {p} | {label} | {r['inference']['slo_attainment']:.10f} | "
                f"{_count(r['inference']['slo_violating_requests'])} | {r['training']['progress']:,.0f} | "
                f"{r['training']['progress'] / static:.2f}x | {r['training']['preemptions']} | "
                f"{r['training']['lost_work_gpu_hours']:,.1f} | {cap.get('inference', 0):.0f} / "
                f"{cap.get('training', 0):.0f} / {cap.get('loaned', 0):.0f} | {r['wall_s']:.0f} | {r['cpu_s']:.0f} |")
    checks = {label: _checks(both[label], strict_targets) for _, label, _ in ASSUMPTIONS}
    labels = [label for _, label, _ in ASSUMPTIONS]
    lines += ["", "| target | " + " | ".join(f"{la} | pass" for la in labels) + " |",
              "|---|" + "---|---|" * len(labels)]
    for k, (name, _, _) in enumerate(checks[labels[0]]):
        cells = " | ".join(f"{checks[la][k][2]} | {'PASS' if checks[la][k][1] else 'FAIL'}" for la in labels)
        lines.append(f"| {name} | {cells} |")
    return lines + [""]


def _checks(res: dict[str, dict], strict_targets: bool) -> list[tuple[str, bool, str]]:
    res = {p: res[p] for p in POLICIES}
    att = {p: r["inference"]["slo_attainment"] for p, r in res.items()}
    prog = {p: r["training"]["progress"] for p, r in res.items()}
    viol = {p: r["inference"]["slo_violating_requests"] for p, r in res.items()}
    ratio_prog = prog["gputide"] / max(prog["static"], 1e-9)
    ratio_viol = viol["gputide"] / max(viol["reactive"], 1e-9)
    checks = [
        ("gputide SLO attainment >= 0.999", att["gputide"] >= 0.999, f"{att['gputide']:.6f}"),
        ("gputide SLO attainment >= static's", att["gputide"] >= att["static"],
         f"{_count(viol['gputide'])} vs {_count(viol['static'])} violating requests "
         f"(difference {viol['gputide'] - viol['static']:+.2g}{_under_one(viol['gputide'] - viol['static'])})"),
        ("training progress >= 1.4 x static", ratio_prog >= 1.4, f"{ratio_prog:.2f}x"),
        ("SLO-violating requests <= 0.5 x reactive", ratio_viol <= 0.5, f"{ratio_viol:.2e}x"),
    ]
    if strict_targets:
        checks.append(("gputide simulated week < 60 s (CPU)", res["gputide"]["cpu_s"] < 60,
                       f"{res['gputide']['cpu_s']:.0f} s CPU, {res['gputide']['wall_s']:.0f} s wall"))
    return checks


def _under_one(difference: float) -> str:
    """Says when gputide's excess of expected violating requests is under one request: the verdict stays strict
    (expected values are compared as they are), but no count of real requests could tell the two apart."""
    return ", under one request" if 0 < difference < 1 else ""


def _count(requests: float) -> str:
    """Expected violating requests: three significant digits below 100 (0.0712 vs 0.0698 must not both read 0.07)."""
    return f"{requests:.3g}" if abs(requests) < 100 else f"{requests:,.0f}"


def main() -> str:
    small = shared_trace("m-small") or tidal.DEFAULT_TRACE
    lines = ["## Tidal capacity shifting (static vs reactive vs gputide)", "",
             "7 simulated days on the 256-GPU demo fleet, 60 s steps, the three policies measured in one run per "
             "trace and per shrink assumption: *lossy* (the default: no training job checkpoints on SIGTERM, so a "
             "shrink loses the work since the job's last checkpoint, as it does on Kubernetes for a Job without "
             "`gputide.io/checkpoint-on-sigterm: \"true\"`) and *checkpointed* (every job checkpoints on SIGTERM, a "
             "shrink loses nothing: the best case, what every earlier run of this benchmark assumed). Wall time "
             "depends on the machine's load; CPU time is this process's. gputide is `gputide run`'s "
             "own loop (hotspot + capacity plan, every action through the safety guard) with the policy the capacity "
             "overlay ships (deploy/components/capacity/policy.yaml: eviction budget 60 an hour, 10 actions a cycle; "
             "with the base policy's 30 and 20, measured separately with gputide simulate, the budget slows the "
             "loans: m-small training 1.40x static instead of 1.42x lossy, 1.59x instead of 1.63x checkpointed, at "
             "0.014 and 0.071 expected violating requests instead of 0.0169 and 0.0744, measured before the keep rule "
             "covered every loan on 2026-12-06); static and "
             "reactive bypass the guard.", ""]
    lines += section("ServeGen m-small (the issue's targets)", run_both(small), True)
    large = shared_trace("m-large")
    if large is not None:
        lines += section("ServeGen m-large", run_both(large), False)
    else:
        lines += ["### ServeGen m-large", "", "Skipped: ../shared/data/servegen-language/m-large is missing.", ""]
    with tempfile.TemporaryDirectory() as tmp:
        burst = burst_trace(small, Path(tmp) / "burst.csv")
        lines += section(f"m-small with a sudden {BURST_FACTOR:g}x burst for one hour (day {BURST_DAY + 1}, "
                         f"{BURST_HOUR:02.0f}:00)", run_both(burst), False)
    lines += [f"Command: `{COMMAND}`", ""]
    text = "\n".join(lines)
    results = ROOT / "bench" / "results"
    results.mkdir(parents=True, exist_ok=True)
    (results / "tidal.md").write_text(text)
    return text


if __name__ == "__main__":
    print(main())
