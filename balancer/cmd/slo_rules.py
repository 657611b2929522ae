"""`gputide slo-rules`: the SLO burn rates and alerts of each profiled service, from vLLM
(`balancer.telemetry.slo_rules`).

    gputide slo-rules --services services.yaml [--out FILE] [--buckets 0.3,0.5,...] [--objective 0.99]
    gputide slo-rules --services services.yaml --prometheus-rule [--namespace gputide] --out slo-rules.yaml

Reads the ServiceProfiles file the controller reads (`gputide run --services`) and writes a Prometheus rule file
(a `groups:` document; with `--prometheus-rule`, a PrometheusRule manifest for the Prometheus Operator) that
records, per service, the request and SLO-violation rates the burn-rate alerts need, from vLLM's end-to-end
latency histogram, its finished-request counter and each service's `latencySloSeconds`, and alerts on them (page
and ticket, multi-window multi-burn-rate) against `--objective` (0.99: latencySloSeconds is a p99 target). Prints
one line per service to stderr: the bucket its violations are counted above (with `--exact`, an SLO between two
boundaries exits 2 instead). Exit 0, or 2 on bad input (naming the file, the field, the value and what is allowed).
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

from balancer.cmd._args import STDOUT, given, output_file
from balancer.errors import InputError
from balancer.telemetry import slo_rules


def _namespace(args: argparse.Namespace) -> str | None:
    """The PrometheusRule's namespace (None: a plain rule file); --namespace alone would be silently ignored."""
    if not args.prometheus_rule:
        if args.namespace is not None:
            raise InputError(None, "--namespace", args.namespace, "only with --prometheus-rule")
        return None
    namespace = "gputide" if args.namespace is None else args.namespace
    if not re.fullmatch(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?", namespace):
        raise InputError(None, "--namespace", namespace, "a namespace name: 1 to 63 lower-case letters, digits and "
                         "'-', starting and ending with a letter or digit")
    return namespace


def run(args: argparse.Namespace) -> int:
    from balancer.app.capacity_run import load_profiles  # pandas and numpy: only when the command runs

    buckets = slo_rules.parse_buckets(args.buckets) if args.buckets is not None else slo_rules.VLLM_E2E_BUCKETS
    objective = slo_rules.parse_objective(args.objective)
    namespace = _namespace(args)
    output_file(args.out, "--out", {"--services": args.services})
    profiles = load_profiles(args.services)
    slos = slo_rules.choose_buckets([(p.name, p.slo_latency_s) for p in profiles.values()], buckets, args.services,
                                    exact=args.exact)
    text = slo_rules.render(slos, buckets, args.services, namespace, objective)
    if args.out in (None, STDOUT):
        sys.stdout.write(text)
    else:
        try:
            Path(args.out).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise InputError(None, "--out", args.out, "a writable file path", str(exc)) from exc
    for slo in slos:
        print(slo_rules.describe(slo), file=sys.stderr)
    return 0


def register(subparsers) -> None:
    p = subparsers.add_parser("slo-rules", help="write the Prometheus rules that derive each service's SLO "
                                                "burn rates from vLLM's metrics, and alert on them")
    p.add_argument("--services", type=given("--services"), required=True, metavar="FILE",
                   help="ServiceProfiles file (name, latencySloSeconds)")
    p.add_argument("--out", type=given("--out"), default=None, metavar="FILE", help="write here (default: stdout)")
    p.add_argument("--buckets", default=None, metavar="LIST",
                   help="the bucket boundaries (s) of vLLM's vllm:e2e_request_latency_seconds, comma-separated "
                        "(default: vLLM's, " + ",".join(f"{b:g}" for b in slo_rules.VLLM_E2E_BUCKETS) + ")")
    p.add_argument("--objective", default=f"{slo_rules.DEFAULT_OBJECTIVE:g}", metavar="SHARE",
                   help="the share of requests that must finish within their latencySloSeconds without an error, "
                        "between 0.5 and 1 (default %(default)s: latencySloSeconds is the p99 target the controller "
                        "sizes capacity for; 0.999 would page a service sitting at its p99 target)")
    p.add_argument("--exact", action="store_true",
                   help="refuse (exit 2) a latencySloSeconds that is not a bucket boundary, instead of counting "
                        "violations above the boundary under it (which may fire early) and saying so on stderr")
    p.add_argument("--prometheus-rule", action="store_true",
                   help="write a PrometheusRule manifest (Prometheus Operator) instead of a rule file")
    p.add_argument("--namespace", default=None, help="the PrometheusRule's namespace (default gputide)")
    p.set_defaults(func=run)
