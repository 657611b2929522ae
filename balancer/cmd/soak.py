"""`gputide soak`: days of simulated fleet life through a real Prometheus with faults (what `make soak` runs).

Prints the invariant table and the per-fault-class table; writes OUT/soak-summary.json, OUT/soak-invariants.md
and OUT/soak-audit.jsonl. Exit code 0 when every invariant held, 1 otherwise, 2 on bad arguments.
See balancer/app/soak.py.
"""

from __future__ import annotations

import argparse
import logging
from pathlib import Path

from balancer.cmd._args import given


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("soak", help="fault-injection soak: the loop on a simulated fleet through a real Prometheus",
                       description="Runs two controller replicas against a simulated fleet through a real "
                                   "Prometheus for DAYS simulated days, injecting a fault every few simulated "
                                   "hours (exporter/Prometheus restarts, telemetry gaps, NaN bursts, a node lost, "
                                   "cooling failures, Kubernetes API 429/409/500, controller restart "
                                   "mid-migration, leader change) and checks invariants throughout.")
    p.add_argument("--days", type=float, default=None, help="simulated days (default 7; 1 with --short)")
    p.add_argument("--gpus", type=int, default=None, help="fleet size (default 512; 128 with --short)")
    p.add_argument("--out", type=given("--out", "a folder"), default="out/soak", metavar="DIR")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--fault-every-hours", type=float, default=None, metavar="H",
                   help="simulated hours between faults (default 4; 2 with --short)")
    p.add_argument("--minutes-per-cycle", type=float, default=None, metavar="M",
                   help="simulated minutes per reconcile cycle (default 20)")
    p.add_argument("--short", action="store_true",
                   help="1 simulated day on 128 GPUs, every fault class once (about 3.5 minutes on 2 cores)")
    p.add_argument("--no-kube", action="store_true", help="skip the Kubernetes API fault classes")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from balancer.app.soak import SoakConfig, run_soak
    from balancer.cmd._args import output_dir, seed
    from balancer.errors import InputError

    cfg = SoakConfig.short_run(seed=args.seed) if args.short else SoakConfig(seed=args.seed)
    if args.days is not None:
        cfg = replace(cfg, days=args.days)
    if args.gpus is not None:
        cfg = replace(cfg, gpus=args.gpus)
    if args.fault_every_hours is not None:
        cfg = replace(cfg, fault_every_hours=args.fault_every_hours)
    if args.minutes_per_cycle is not None:
        cfg = replace(cfg, minutes_per_cycle=args.minutes_per_cycle)
    cfg = replace(cfg, kube=not args.no_kube)
    checks = [("--days", cfg.days, 0 < cfg.days <= 60, "0 < days <= 60"),
              ("--gpus", cfg.gpus, 16 <= cfg.gpus <= 20000, "16 to 20000"),
              ("--fault-every-hours", cfg.fault_every_hours, 0.5 <= cfg.fault_every_hours <= 24 * 7,
               "0.5 to 168 simulated hours"),
              ("--minutes-per-cycle", cfg.minutes_per_cycle, 1 <= cfg.minutes_per_cycle <= 120, "1 to 120")]
    for name, value, ok, allowed in checks:
        if not ok:
            raise InputError(None, name, value, allowed)
    seed(args.seed)
    output_dir(args.out, "--out")
    if getattr(args, "log_level", "INFO") != "DEBUG":   # fail-static holds and API retries are expected here
        for name in ("balancer", "urllib3"):
            logging.getLogger(name).setLevel(logging.ERROR)
    summary = run_soak(cfg, Path(args.out))
    return 0 if summary["all_held"] else 1

