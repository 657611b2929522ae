"""Forecast benchmark: rolling-origin backtest of every model on both ServeGen language traces.

Protocol: balancer.forecast.backtest.backtest (refit daily, update every step, first 7 days history only,
3 days of calibration origins before that), 10-minute steps, horizons 1h/4h/24h, every `GPUTIDE_BENCH_STRIDE`-th
origin (default 1 = every step). Baselines (persistence, seasonal naive daily and weekly) are measured in the
same run on the same points. Targets (issue 4): auto 1h MAE <= 0.85 x the best naive baseline, 4h MAE <= 0.8 x,
p90 coverage in [0.85, 0.95] at every horizon, one trace's whole backtest under 60 s.

Run: .venv/bin/python -m bench.bench_forecast   (GPUTIDE_SHARED_DATA=../shared/data by default)
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TRACES = ("m-small", "m-large")
TARGETS = {"1h": 0.85, "4h": 0.80}


def data_dir() -> Path:
    return Path(os.environ.get("GPUTIDE_SHARED_DATA", ROOT.parent / "shared" / "data"))


def _ok(flag: bool) -> str:
    return "pass" if flag else "FAIL"


def one_trace(name: str, stride: int) -> tuple[str, list[str]]:
    from balancer.forecast import load_demand
    from balancer.forecast.backtest import backtest, format_table

    y = load_demand(data_dir() / "servegen-language" / name, "servegen")
    t0, c0 = time.perf_counter(), time.process_time()
    scores, details = backtest(y, stride=stride)
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    base = details["baseline_mae"]
    auto = {s.horizon: s for s in scores if s.model == "auto"}
    load = os.getloadavg()[0]
    lines = [f"### {name}: {len(y)} steps of 10 min, {details['origins']} scored origins, {cpu:.1f} CPU s "
             f"({seconds:.1f} s wall, load average {load:.1f})", "",
             format_table(scores), "", "| check | figure | target | result |", "|---|---|---|---|"]
    verdicts = []
    for h, limit in TARGETS.items():
        best = min(base[f"{b}@{h}"] for b in ("persistence", "seasonal_naive_daily", "seasonal_naive_weekly"))
        ratio = auto[h].mae / best
        verdicts.append(ratio <= limit)
        lines.append(f"| auto {h} MAE / best naive ({best:.1f}) | {ratio:.3f} | <= {limit} | {_ok(ratio <= limit)} |")
    for h, s in auto.items():
        ok = 0.85 <= s.coverage_p90 <= 0.95
        verdicts.append(ok)
        lines.append(f"| auto {h} p90 coverage | {s.coverage_p90:.3f} | 0.85-0.95 | {_ok(ok)} |")
    # single-threaded: CPU time is what it takes on an idle 2-core machine; wall time depends on other load
    verdicts.append(cpu < 60)
    lines.append(f"| whole backtest, CPU time (wall {seconds:.1f} s) | {cpu:.1f} s | < 60 s | {_ok(cpu < 60)} |")
    if details["fallbacks"]:
        lines.append(f"\nFallbacks: {details['fallbacks']}")
    return "\n".join(lines), verdicts


def main() -> str:
    stride = int(os.environ.get("GPUTIDE_BENCH_STRIDE", "1"))
    folder = data_dir() / "servegen-language"
    cmd = "`.venv/bin/python -m bench.bench_forecast`" + (f" (GPUTIDE_BENCH_STRIDE={stride})" if stride > 1 else "")
    out = ["## Forecast: rolling-origin backtest on ServeGen", "",
           f"Command: {cmd}; CPUs: {os.cpu_count()}. MAE is of the p50; MASE = MAE / the baseline's MAE on the "
           "same points; coverage = share of outcomes <= calibrated p90; `fit s` = total fit+update+predict time "
           "of that model over the whole backtest.", ""]
    if not folder.is_dir():
        return "\n".join([*out, f"Skipped: {folder} not found (set GPUTIDE_SHARED_DATA)."])
    passed = failed = 0
    for name in TRACES:
        text, verdicts = one_trace(name, stride)
        out += [text, ""]
        passed += sum(verdicts)
        failed += len(verdicts) - sum(verdicts)
    out.append(f"Targets: {passed} passed, {failed} missed.")
    return "\n".join(out)


if __name__ == "__main__":
    text = main()
    (ROOT / "bench" / "results").mkdir(parents=True, exist_ok=True)
    (ROOT / "bench" / "results" / "forecast.md").write_text(text + "\n")
    print(text)
    sys.exit(0)
