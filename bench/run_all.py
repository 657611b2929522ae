"""Run every benchmark module (bench/bench_*.py) in this process and write bench/RESULTS.md.

Each module's `main()` returns a markdown section that reports its figures as ratios against baselines measured
in the same run, with the command that produced them. `make bench` calls this; `--only NAME[,NAME]` runs a subset
(the other sections keep their last results from bench/results/).
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

HERE = Path(__file__).resolve().parent
ORDER = ["exporter", "sim", "forecast", "placement", "consolidation", "loop", "tidal", "observe", "scale", "k8s",
         "schedule", "soak"]


def _modules() -> list[str]:
    names = [m.name.removeprefix("bench_") for m in pkgutil.iter_modules([str(HERE)]) if m.name.startswith("bench_")]
    return sorted(names, key=lambda n: (ORDER.index(n) if n in ORDER else len(ORDER), n))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--only", default="", help="comma-separated bench names, e.g. sim,forecast")
    parser.add_argument("--assemble", action="store_true",
                        help="run nothing: rebuild RESULTS.md from the sections in bench/results/")
    args = parser.parse_args(argv)
    only = {s for s in args.only.split(",") if s}
    results = HERE / "results"
    results.mkdir(exist_ok=True)
    failed: list[str] = []
    for name in _modules():
        if args.assemble or (only and name not in only):
            continue
        print(f"== bench {name} ==", flush=True)
        t0 = time.perf_counter()
        try:
            section = importlib.import_module(f"bench.bench_{name}").main()
        except Exception as exc:  # a broken benchmark is reported, the others still run
            failed.append(name)
            section = f"## {name}\n\nFAILED: {type(exc).__name__}: {exc}\n"
        (results / f"{name}.md").write_text(section.rstrip() + "\n")
        print(f"   {name}: {time.perf_counter() - t0:.1f} s", flush=True)
    how = ("Assembled by `.venv/bin/python -m bench.run_all --assemble` from the latest section of each benchmark "
           "in bench/results/ (each ran on its own, with the command it names)" if args.assemble else
           "Written by `make bench` (`.venv/bin/python -m bench.run_all`)")
    header = (
        "# Benchmark results\n\n"
        f"{how} on {datetime.now(UTC):%Y-%m-%d %H:%M} UTC, "
        f"{platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}.\n"
        "Every figure is measured in the same run as its baseline; each section names the command that produced it.\n"
    )
    names = [*_modules(), *(n for n in ORDER if n not in _modules())]  # soak runs under `make soak`, not here
    sections = [(results / f"{n}.md").read_text() for n in names if (results / f"{n}.md").exists()]
    (HERE / "RESULTS.md").write_text(header + "\n" + "\n".join(sections))
    print(f"wrote {HERE / 'RESULTS.md'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
