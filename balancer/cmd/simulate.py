"""`gputide simulate`: run a scenario on the embedded simulator under a control policy and write the results.

    gputide simulate --scenario hotspot --policy gputide [--cluster SPEC.yaml] [--trace PATH]
                     [--format csv|servegen|requests] [--days N] [--seed S] [--step 60] [--print json|table]
                     [--policy-file FILE] [--checkpoint-on-sigterm none|all] --out DIR

Writes DIR/summary.json, DIR/timeseries.csv, DIR/audit.jsonl and DIR/timeseries.png; prints the summary
(`--print`). A figure the run could not measure (the reconcile times of a policy that runs no cycle, `none`) is
null in the JSON and "not measured" in the table, never 0. `--format` is the format of the demand trace
(`balancer.forecast.traces.load_demand`): by default a folder is read as ServeGen and a file as `timestamp,value`
CSV. How a trace meets the simulator's `--step` is the scenario's to say: `hotspot` averages a trace finer than
`--step` onto it, as `forecast backtest --step` resamples one (so a trace whose own step is under 1 s runs too), and
holds each step of a coarser one; `tidal` reads its trace at 10 minutes whatever `--step` (finer steps averaged,
coarser ones interpolated); another application's scenario reads it its own way (`scenarios.demand_from_trace`
without a step plays a trace at its own step and refuses one under 1 s). `--checkpoint-on-sigterm`
(tidal only): whether the training jobs save a checkpoint when a shrink stops their workers (`all`: a shrink loses
nothing) or not (`none`, the default: a shrink loses the work since the job's last checkpoint).
Scenarios: `balancer.app.scenarios.SCENARIOS` (with `tidal` from `balancer.app.tidal`); policies:
`balancer.app.scenarios.POLICIES` (`none`, `gputide` and whatever other applications registered).
"""

from __future__ import annotations

import argparse
import json

from balancer import config, fleet
from balancer.app import scenarios
from balancer.cmd._args import given, output_dir, seed
from balancer.errors import InputError

NOT_MEASURED = "not measured"   # a summary figure the run had nothing to measure for (null in summary.json)
# the policies that read --policy-file (the reconcile loop's BalancerPolicy: `scenarios.GputideController`, tidal's
# `GputideTidal`); none, static and reactive read none, so a file given with them was ignored without a word
POLICY_FILE_POLICIES = ("gputide",)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("simulate", help="run a scenario on the simulated fleet under a control policy")
    p.add_argument("--scenario", required=True, help="scenario name (e.g. hotspot)")
    p.add_argument("--policy", required=True, help="control policy: none, gputide, ...")
    p.add_argument("--cluster", type=given("--cluster"), default=None, metavar="SPEC",
                   help="FleetSpec YAML (default: the scenario's fleet)")
    p.add_argument("--trace", type=given("--trace"), default=None, metavar="PATH",
                   help="demand trace (file or ServeGen folder)")
    p.add_argument("--format", choices=scenarios.TRACE_FORMATS, default=None, dest="trace_format",
                   help="trace format (default: a folder is servegen, a file csv)")
    p.add_argument("--days", type=float, default=None, help="simulated days (default: the scenario's)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--step", type=float, default=60.0, help="simulator step in seconds")
    p.add_argument("--print", choices=("json", "table"), default="table", dest="print_as",
                   help="how to print the summary (default table)")
    p.add_argument("--policy-file", type=given("--policy-file"), default=None, metavar="FILE",
                   help="BalancerPolicy YAML for the gputide policy (only with --policy gputide)")
    p.add_argument("--checkpoint-on-sigterm", choices=("none", "all"), default=None,
                   help="tidal: do the training jobs checkpoint on SIGTERM, so a shrink loses nothing (default none)")
    p.add_argument("--out", type=given("--out", "a folder"), required=True, metavar="DIR")
    p.add_argument("--no-plots", action="store_true", help="skip the PNG plots")
    p.set_defaults(func=run)


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flat(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def run(args: argparse.Namespace) -> int:
    if args.days is not None and not 0 < args.days <= 366:
        raise InputError(None, "--days", args.days, "a number of days from 0 (exclusive) to 366")
    if not 1 <= args.step <= 3600:
        raise InputError(None, "--step", args.step, "seconds from 1 to 3600")
    seed(args.seed)
    output_dir(args.out, "--out")
    if args.trace_format is not None and args.trace is None:
        raise InputError(None, "--format", args.trace_format, "no --format without --trace (it is the trace's format)")
    from balancer.app import tidal  # noqa: F401  (registers the tidal scenario and the static/reactive policies)

    registry = scenarios.POLICIES
    if args.policy not in registry:
        raise InputError(None, "--policy", args.policy, "one of " + ", ".join(sorted(registry)))
    if args.policy_file is not None and args.policy not in POLICY_FILE_POLICIES:
        raise InputError(None, "--policy-file", args.policy_file, f"only with --policy "
                         f"{' or '.join(POLICY_FILE_POLICIES)} (the reconcile loop's BalancerPolicy; the "
                         f"{args.policy} policy reads none)")
    spec = fleet.load(args.cluster) if args.cluster else None
    policy = config.load(args.policy_file) if args.policy_file else None
    sim, events, days = scenarios.build(args.scenario, fleet=spec, seed=args.seed, step_s=args.step, days=args.days,
                                        trace=args.trace, trace_format=args.trace_format, setup_options=(
                                            None if args.checkpoint_on_sigterm is None
                                            else {"checkpoint_on_sigterm": args.checkpoint_on_sigterm}))
    summary = scenarios.run_simulation(sim, args.policy, days, args.step, args.out, events=events,
                                       scenario=args.scenario, policy=policy, plots=not args.no_plots)
    if args.print_as == "json":
        print(json.dumps(summary, indent=2, sort_keys=True))
    else:
        for key, value in _flat(summary).items():
            shown = NOT_MEASURED if value is None else f"{value:.6g}" if isinstance(value, float) else value
            print(f"{key:40s} {shown}")
    return 0
