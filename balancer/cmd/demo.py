"""`gputide demo`: what `make demo` runs (see balancer/app/demo.py)."""

from __future__ import annotations

import argparse
from pathlib import Path

from balancer.cmd._args import distinct, given
from balancer.errors import items

STAGES = ("live", "hotspot", "tidal", "forecast", "place")


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("demo", help="run the main job on an embedded simulated cluster and real traces",
                       description="Runs the reconcile loop on a simulated fleet through a real Prometheus, the "
                                   "hotspot and tidal scenarios, a forecast backtest and a placement replay, and "
                                   "writes OUT/report.html.")
    p.add_argument("--out", type=given("--out", "a folder"), default="out", metavar="DIR")
    p.add_argument("--quick", action="store_true", help="shorter runs (a few minutes in all)")
    p.add_argument("--stages", default=",".join(STAGES), help=f"comma-separated subset of {','.join(STAGES)}")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from balancer.app.demo import run_demo
    from balancer.cmd._args import output_dir
    from balancer.errors import InputError

    allowed = "comma-separated stages of " + ", ".join(STAGES)
    stages = tuple(items(args.stages, "--stages", allowed))   # `live,,place` ran two stages without a word
    unknown = [s for s in stages if s not in STAGES]
    if unknown or not stages:
        raise InputError(None, "--stages", unknown[0] if unknown else args.stages, allowed)
    distinct(list(stages), "--stages")
    output_dir(args.out, "--out")
    run_demo(Path(args.out), quick=args.quick, stages=stages)
    return 0
