"""`gputide place`: replay an Alibaba v2023-format pod list on a node list with one placement policy.

Follows the FGD paper's arrival-only protocol (see balancer.plan.placement.replay): per seed, shuffle, inflate
to `--inflate` x GPU capacity, record the GPU allocation ratio at each arrived level. Prints the median
unallocated GPU % at 50/80/100/130 % arrival and, with `--json OUT`, writes every seed's curve, the median curve
and `unallocated_gpu_pct_at_100` (the median at 100 %); `--json -` writes them to standard output and the table to
standard error.
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

from balancer.cmd._args import given, only_with, output_file, report_to, write_json
from balancer.errors import InputError
from balancer.plan.defrag import Defragmenter
from balancer.plan.placement.replay import check_replayable, fgd_seeds, load_nodes, load_pods, replay
from balancer.plan.placement.scheduler import POLICIES
from balancer.plan.placement.unplaceable import Unfit, hint, unknown_models

MAX_SEEDS = 1000
MAX_MOVES = 2   # --defrag's moves per failed pod unless --max-moves is given


def register(subparsers) -> None:
    parser = subparsers.add_parser("place", help="replay a pod list with a placement policy (FGD protocol)")
    parser.add_argument("--nodes", type=given("--nodes"), required=True,
                        help="node list CSV (sn,cpu_milli,memory_mib,gpu,model)")
    parser.add_argument(
        "--pods", type=given("--pods"), required=True,
        help="pod list CSV (name,cpu_milli,memory_mib,num_gpu,gpu_milli[,gpu_spec])"
    )
    parser.add_argument("--policy", required=True, help=f"one of: {', '.join(POLICIES)}")
    parser.add_argument("--seeds", type=int, default=10, help="number of seeds (42, 43, ...), default 10")
    parser.add_argument(
        "--inflate", type=float, default=1.3, help="arrive up to this x GPU capacity, default 1.3"
    )
    parser.add_argument(
        "--defrag", action="store_true", help="consolidate (at most --max-moves moves) when a pod fails"
    )
    # default None (MAX_MOVES once checked): given without --defrag, which alone reads it, it is refused, not ignored
    parser.add_argument("--max-moves", type=int, default=None,
                        help=f"with --defrag: moves allowed per failed pod (default {MAX_MOVES})")
    parser.add_argument("--json", type=given("--json"), dest="json_out",
                        help="write per-seed and median curves here (- for stdout)")
    parser.set_defaults(func=run)


def summarise(results, args) -> dict:
    curves = np.array([r.unallocated_pct for r in results])
    median = np.median(curves, axis=0)
    return {
        "nodes": str(args.nodes),
        "pods": str(args.pods),
        "policy": args.policy,
        "defrag": bool(args.defrag),
        "inflate": args.inflate,
        "levels_pct": list(range(curves.shape[1])),
        "unallocated_gpu_pct_at_100": round(float(median[100]), 4) if len(median) > 100 else None,
        "median_unallocated_gpu_pct": [round(float(x), 4) for x in median],
        "seeds": [
            {
                "seed": r.seed,
                "unallocated_gpu_pct": [round(float(x), 4) for x in r.unallocated_pct],
                "placed": r.placed,
                "failed": r.failed,
                "moves": r.moves,
                "seconds": round(r.seconds, 3),
            }
            for r in results
        ],
    }


def notes(unfit: list[Unfit], pods, models: tuple[str, ...], args: argparse.Namespace) -> list[str]:
    """What the replay will not say: pods that no node can take (they fail in every seed, whatever the policy) and
    gpu_spec names that match no node's model (a typo narrows a pod to its other models without a word)."""
    out = []
    if unfit:
        u = unfit[0]
        out.append(f"{args.pods}: {len(unfit)} of {len(pods)} pods fit no node of {args.nodes} even with every node "
                   f"empty and fail in every seed; the first, row {u.index + 2}: field '{u.field}' is {u.value!r}, "
                   f"allowed: {u.allowed}" + (f" ({u.hint})" if u.hint else ""))
    for name, (count, first) in unknown_models(pods, models).items():
        guess = hint((name,), models)
        out.append(f"{args.pods}: gpu_spec names {name!r}, a model no node of {args.nodes} has, on {count} GPU "
                   f"pod{'s' if count > 1 else ''} (the first on row {first + 2})" + (f"; {guess}" if guess else ""))
    return out


def max_moves(args: argparse.Namespace) -> None:
    """--max-moves checked, and set to `MAX_MOVES` when left out. It bounds --defrag's moves and nothing else:
    `--max-moves 5` without --defrag replayed with no defragmentation at all and exited 0, the table and the JSON
    silent on the moves never made."""
    if args.max_moves is not None and args.max_moves < 1:
        raise InputError(None, "--max-moves", args.max_moves, "an integer >= 1")
    only_with(args, {"--max-moves": ("max_moves", MAX_MOVES)}, args.defrag, "only with --defrag (it bounds the moves "
              "made for a pod that fits nowhere; without --defrag none is made)")


def run(args: argparse.Namespace) -> int:
    if args.policy not in POLICIES:
        raise InputError(None, "--policy", args.policy, ", ".join(POLICIES))
    if not 1 <= args.seeds <= MAX_SEEDS:
        raise InputError(None, "--seeds", args.seeds, f"an integer from 1 to {MAX_SEEDS}")
    if not 1.0 <= args.inflate <= 5.0:
        raise InputError(None, "--inflate", args.inflate, "a number between 1.0 and 5.0")
    max_moves(args)
    output_file(args.json_out, "--json", {"--nodes": args.nodes, "--pods": args.pods})
    nodes, pods = load_nodes(args.nodes), load_pods(args.pods)
    if not pods:
        raise InputError(args.pods, "rows", 0, "at least one pod")
    for line in notes(check_replayable(nodes, pods, args.nodes, args.pods), pods, nodes.models, args):
        print(f"gputide place: note: {line}", file=sys.stderr)
    defrag = Defragmenter(args.max_moves) if args.defrag else None
    results = [replay(nodes, pods, args.policy, seed, args.inflate, defrag) for seed in fgd_seeds(args.seeds)]
    summary = summarise(results, args)
    median = summary["median_unallocated_gpu_pct"]
    label = args.policy + (" +defrag" if args.defrag else "")
    with report_to(args.json_out):
        print(f"policy {label}: {nodes.n_nodes} nodes, {nodes.total_gpu_milli // 1000} GPUs, {len(pods)} pods, "
              f"{args.seeds} seeds")  # fmt: skip
        print("| arrived % | unallocated GPU % (median) |")
        print("|---:|---:|")
        for level in (50, 80, 100, 130):
            if level < len(median):
                print(f"| {level} | {median[level]:.2f} |")
    if args.json_out:
        write_json(args.json_out, summary, indent=1)
    return 0
