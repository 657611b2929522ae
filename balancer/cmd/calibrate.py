"""`gputide calibrate`: the `rpsPerReplica` each service's own history supports (see `balancer.plan.calibration`).

    gputide calibrate --prometheus URL --service NAME [--service NAME ...] [--slo 0.5] [--margin 1.0]
                      [--range 7d] [--end TIME] [--step 1m] [--settle 5m]
                      [--demand-query Q] [--replicas-query Q] [--latency-query Q] [--json OUT]
    gputide calibrate --csv FILE [--service NAME] [--slo 0.5] [--margin 1.0] [--settle 5m] [--json OUT]
    gputide calibrate --prometheus URL --services services.yaml [--cluster NAME] [--write-services OUT] ...

With `--services` (a ServiceProfiles file), every profiled service is calibrated against its own
`latencySloSeconds`, and the table compares the profile's `rpsPerReplica` with what its history supports: a
`measured` figure replaces it, a `lower` bound only raises it (the data says "at least"), `none` keeps it;
`--write-services OUT` writes the whole file so changed, checked by the controller's own loader.

From Prometheus, three range queries per service (`$service` is replaced by its name; the defaults read the
`gputide_inference_*` series, with the replicas that serve: placed and warm, as kube-state-metrics'
`kube_deployment_status_replicas_available` counts them); from a CSV, one row per sample with the header
`timestamp,demand_rps,replicas,p99_s` (ISO-8601 or epoch seconds), read whole: `--cluster`, `--range`, `--end`,
`--step` and the queries are refused with it. Prints, per service, the estimate, whether the
data crossed the SLO (measured) or only shows a lower bound, the samples behind it, and a ServiceProfiles snippet
(`--json -` writes the JSON to standard output and these to standard error).
Exit 0 when every service got an estimate, 1 when one did not (or Prometheus did not answer), 2 on bad input.
"""

from __future__ import annotations

import argparse
import math
import sys
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd

from balancer.cmd._args import (
    STDOUT,
    distinct,
    duration,
    epoch,
    given,
    number,
    only_with,
    output_file,
    report_to,
    write_json,
)
from balancer.cmd.run import cluster_name, prometheus_url
from balancer.config import SLO_RANGE_S  # --slo as a services file's latencySloSeconds
from balancer.errors import InputError, TelemetryError
from balancer.telemetry.promapi import MAX_POINTS, MOST_RANGE_S
from balancer.telemetry.slo_rules import service_name

DEMAND_QUERY = 'max(gputide_inference_demand_rps{$selector})'
REPLICAS_QUERY = 'max(gputide_inference_replicas_ready{$selector})'
LATENCY_QUERY = 'max(gputide_inference_latency_p99_seconds{$selector})'
CSV_COLUMNS = ("timestamp", "demand_rps", "replicas", "p99_s")
DEFAULT_RANGE, DEFAULT_STEP = "7d", "1m"
# the flags only the Prometheus path reads: {flag: (attribute, default)}
PROMETHEUS_ONLY = {"--cluster": ("cluster", None), "--range": ("range_", DEFAULT_RANGE), "--end": ("end", None),
                   "--step": ("step", DEFAULT_STEP), "--demand-query": ("demand_query", DEMAND_QUERY),
                   "--replicas-query": ("replicas_query", REPLICAS_QUERY),
                   "--latency-query": ("latency_query", LATENCY_QUERY)}


def register(subparsers) -> None:
    p = subparsers.add_parser("calibrate", help="estimate each service's rpsPerReplica from its load and p99 history")
    src = p.add_mutually_exclusive_group(required=True)
    src.add_argument("--prometheus", type=given("--prometheus", "a URL"), metavar="URL", help="Prometheus base URL")
    src.add_argument("--csv", type=given("--csv"), metavar="FILE", help="samples: timestamp,demand_rps,replicas,p99_s")
    p.add_argument("--service", action="append", default=[], help="service name (repeat for several)")
    p.add_argument("--services", type=given("--services"), default=None, metavar="FILE",
                   help="ServiceProfiles file: calibrate every service in it, each against its own latency SLO")
    p.add_argument("--slo", type=float, default=None,
                   help="p99 latency SLO, 0.001 to 3600 s (default: the profile's latencySloSeconds, else 0.5)")
    p.add_argument("--margin", type=float, default=1.0,
                   help="aim at margin x SLO, 0 < margin <= 1 and margin x SLO at least 0.001 s (default 1)")
    # --range, --end, --step and the queries default to None (filled in by `_prometheus_only`): given with --csv,
    # which reads none of them, they are refused rather than ignored
    p.add_argument("--range", dest="range_", default=None,
                   help=f"with --prometheus: history to read (default {DEFAULT_RANGE}, at most 366d)")
    p.add_argument("--end", default=None,
                   help="with --prometheus: end of the history (ISO-8601 or epoch seconds; default now)")
    p.add_argument("--step", default=None, help=f"with --prometheus: range-query step (default {DEFAULT_STEP})")
    p.add_argument("--settle", default="5m", help="drop samples this soon after a replica change (default 5m)")
    p.add_argument("--demand-query", type=given("--demand-query", "a PromQL query"), default=None,
                   help=f"with --prometheus: PromQL; $service, $namespace, $selector filled in "
                        f"(default {DEMAND_QUERY})")
    p.add_argument("--replicas-query", type=given("--replicas-query", "a PromQL query"), default=None,
                   help=f"with --prometheus: PromQL (default {REPLICAS_QUERY})")
    p.add_argument("--latency-query", type=given("--latency-query", "a PromQL query"), default=None,
                   help=f"with --prometheus: PromQL, seconds (default {LATENCY_QUERY})")
    p.add_argument("--cluster", default=None, metavar="NAME",
                   help="with --prometheus: read only this cluster's series ($selector gets cluster=\"NAME\", "
                        "$cluster is NAME), as `gputide run --cluster` does; without it a Prometheus holding several "
                        "clusters sums one service's demand and replicas over all of them and takes the worst p99")
    p.add_argument("--json", type=given("--json"), default=None, metavar="OUT",
                   help="also write the estimates as JSON (- for stdout)")
    p.add_argument("--write-services", type=given("--write-services"), default=None, metavar="OUT",
                   help="with --services: write the whole profiles file here with each rpsPerReplica as suggested "
                        "(the file the controller reads, checked as it reads it; YAML comments are not kept)")
    p.set_defaults(func=run)


def _frame(times, demand, replicas, p99) -> pd.DataFrame:
    return pd.DataFrame({"t": np.asarray(times, float), "demand": np.asarray(demand, float),
                         "replicas": np.asarray(replicas, float), "p99": np.asarray(p99, float)})


def from_csv(path: str) -> pd.DataFrame:
    from balancer.forecast.traces import booleans, cell, check_header, read_rows, to_utc

    try:
        raw = read_rows(path)
    except (OSError, ValueError, pd.errors.ParserError) as exc:
        raise InputError(path, "file", path, "a CSV file with header " + ",".join(CSV_COLUMNS)) from exc
    check_header(path)
    missing = [c for c in CSV_COLUMNS if c not in raw.columns]
    if missing:
        raise InputError(path, missing[0], None, "a column of the header " + ",".join(CSV_COLUMNS))
    if raw.empty:
        raise InputError(path, "rows", 0, "at least one sample below the header")
    cols = {}
    for c in CSV_COLUMNS[1:]:
        v = pd.to_numeric(raw[c], errors="coerce").to_numpy(float)
        bad = np.flatnonzero(~np.isfinite(v) & raw[c].notna().to_numpy() | (v < 0) | booleans(raw[c]).to_numpy())
        if bad.size:
            raise InputError(path, c, cell(raw[c], bad[0]), "numbers >= 0 (empty = missing)",
                             detail=f"row {bad[0] + 2}")
        cols[c] = v
    index = to_utc(raw["timestamp"], path, "timestamp")
    repeated = np.flatnonzero(index.duplicated())
    if repeated.size:   # two samples at one time: which replica count held then?
        raise InputError(path, "timestamp", cell(raw["timestamp"], repeated[0]), "each time once",
                         detail=f"row {repeated[0] + 2}")
    # in time order: the settle filter measures the time since the last replica change row by row
    return _frame(index.as_unit("s").asi8.astype(float), cols["demand_rps"], cols["replicas"],
                  cols["p99_s"]).sort_values("t", kind="stable", ignore_index=True)


def from_prometheus(source, args: argparse.Namespace, service: str, start: float, end: float,
                    step_s: float) -> pd.DataFrame:
    """The three series of `service` (range queries through `source.demand_history`) as one frame."""
    from balancer.app.capacity_run import service_query

    got = [source.demand_history(service_query(q, service, args.cluster), start, end, step_s)
           for q in (args.demand_query, args.replicas_query, args.latency_query)]
    index = got[0].index
    return _frame(index.as_unit("s").asi8.astype(float), *(s.reindex(index).to_numpy(float) for s in got))


def estimate(frame: pd.DataFrame, slo_s: float, margin: float, settle_s: float):
    from balancer.plan.calibration import calibrate, settled

    # settled first, over every sample: a count missing or at 0 in between is a change the filter must see
    keep = settled(frame["t"].to_numpy(), frame["replicas"].to_numpy(), settle_s)
    f = frame[keep & (frame["replicas"] > 0).to_numpy()]
    return calibrate((f["demand"] / f["replicas"]).to_numpy(float), f["p99"].to_numpy(float), slo_s, margin=margin)


def suggestion(current: float | None, c) -> float | None:
    """The rpsPerReplica to write: a measured limit as is, a lower bound only upwards, no estimate: unchanged."""
    if c.rps_per_replica is None or c.bound == "none":
        return current
    if c.bound == "lower" and current is not None:
        return max(current, c.rps_per_replica)
    return c.rps_per_replica


def profile_number(value: float) -> str:
    """`value` to four significant digits, rounded down (a limit is not raised by its rounding), written as YAML
    reads a number: `{:.4g}` wrote 10000 as `1e+04` and 0.00005 as `5e-05`, which YAML reads as strings."""
    if value <= 0:
        return "0"
    exponent = 3 - math.floor(math.log10(value))
    digits = math.floor(value * 10.0 ** exponent * (1 + 1e-12))  # 1e-12: 29.44 is not 29.43 for binary rounding
    return format(Decimal(digits).scaleb(-exponent).normalize(), "f")


def aimed_at(margin: float, slos: dict[str, float]) -> None:
    """InputError naming --margin unless margin x SLO, the p99 calibration aims at, is at least --slo's floor for
    each service ({name: SLO in seconds}): `--margin 1e-320` passed `0 < margin <= 1` and put every sample over the
    target, as `--slo 1e-320` did."""
    least = SLO_RANGE_S[0]
    for name, slo in slos.items():
        if slo * margin < least * (1 - 1e-9):   # 1e-9: 0.002 x 0.5 is 0.001, whatever binary rounding says
            raise InputError(None, "--margin", margin, f"a number in (0, 1] whose margin x SLO is at least {least:g} s "
                             f"(--slo's floor): at least {least / slo:.3g} for {name}'s SLO of {slo:g} s")


def _prometheus_only(args: argparse.Namespace) -> None:
    """With --csv, an InputError naming the first flag of `PROMETHEUS_ONLY` given (the CSV is read whole, as it
    is: `--csv F --step 0`, `--range=-1d`, `--end 0` or `--demand-query x` exited 0, checked only on the path that
    never ran); with --prometheus, each flag left out set to its default."""
    only_with(args, PROMETHEUS_ONLY, not args.csv, "only with --prometheus (a CSV's samples are read whole and as "
              "they are: no cluster, time window, step or query applies to them)")


def _checked(args: argparse.Namespace) -> float:
    """Every command-line value checked before anything is read; the settle time in seconds."""
    if args.slo is not None:
        number(args.slo, "--slo", *SLO_RANGE_S, unit=" (seconds, as a services file's latencySloSeconds)")
    if not 0 < args.margin <= 1:
        raise InputError(None, "--margin", args.margin, "a number in (0, 1]")
    if args.prometheus:
        prometheus_url(args.prometheus)
    _prometheus_only(args)
    cluster_name(args.cluster)   # it goes into PromQL matchers
    for name in args.service:
        service_name(name, None, "--service")   # it goes into PromQL matchers
    # `--service chat --service chat` queried chat twice, or with --csv was refused as 'one name' with no word why
    distinct(args.service, "--service", values="service names (one --service each)")
    inputs = {"--csv": args.csv, "--services": args.services}
    output_file(args.json, "--json", inputs)
    if args.write_services is not None and not args.services:
        raise InputError(None, "--write-services", args.write_services, "only with --services FILE (the profiles "
                         "file it rewrites)")
    if args.write_services == STDOUT:   # a whole ServiceProfiles file, not JSON: '-' made a file named '-'
        raise InputError(None, "--write-services", STDOUT, "a file path (it writes the whole ServiceProfiles file; "
                         "the run prints each service's rpsPerReplica on standard output)")
    output_file(args.write_services, "--write-services", inputs)
    return duration(args.settle, "--settle", allow_zero=True)


def write_profiles(source: str, out: str, suggested: dict[str, float | None]) -> None:
    """`source` (a ServiceProfiles file) written to `out` with each suggested rpsPerReplica, as the snippet prints
    it; everything else as it was. Checked by the controller's own loader before it is written."""
    import yaml

    from balancer.app.capacity_run import profiles_from_dict
    from balancer.yamlfile import read_yaml

    doc = read_yaml(source, "service profiles")
    for item in doc["services"]:
        if suggested.get(item["name"]) is not None:
            item["rpsPerReplica"] = yaml.safe_load(profile_number(suggested[item["name"]]))
    profiles_from_dict(doc, out)
    text = f"# {source} with rpsPerReplica from `gputide calibrate`\n" + yaml.safe_dump(doc, sort_keys=False)
    try:
        Path(out).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise InputError(None, "--write-services", out, "a writable file path", str(exc)) from exc


def _from_prometheus(args: argparse.Namespace) -> dict[str, pd.DataFrame]:
    """Each service's samples from Prometheus; TelemetryError when it does not answer."""
    step_s, span = duration(args.step, "--step"), duration(args.range_, "--range", most=MOST_RANGE_S)
    if span / step_s > MAX_POINTS:
        raise InputError(None, "--step", args.step, f"at least {span / MAX_POINTS:.0f}s for --range {args.range_} "
                         f"(Prometheus returns at most {MAX_POINTS} points a series)")
    end = epoch(args.end, "--end")
    from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource

    source = PrometheusTelemetrySource(PrometheusOptions(url=args.prometheus))  # one client for every service
    return {name: from_prometheus(source, args, name, end - span, end, step_s) for name in args.service}


def _print_report(results: dict, current: dict[str, float], suggested: dict[str, float | None], slo_of) -> None:
    """The table of estimates and the ServiceProfiles snippet."""
    print("| service | SLO s | rpsPerReplica | bound | profile now | samples | within 10% | over the SLO beyond it "
          "| load per replica seen | why |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, c in results.items():
        rps = "-" if c.rps_per_replica is None else f"{c.rps_per_replica:.4g}"
        now = f"{current[name]:.4g}" if name in current else "-"
        print(f"| {name} | {slo_of(name):g} | {rps} | {c.bound} | {now} | {c.samples} | {c.support} | {c.over} | "
              f"{c.load_range[0]:.4g}-{c.load_range[1]:.4g} | {c.reason} |")
    if any(v is not None for v in suggested.values()):
        print("\n# ServiceProfiles rpsPerReplica: 'measured' replaces, 'lower' only raises, 'none' keeps")
        print("services:")
        for name, v in suggested.items():
            if v is not None:
                print(f"  - name: {name}\n    rpsPerReplica: {profile_number(v)}  # {results[name].bound}")


def run(args: argparse.Namespace) -> int:
    settle_s = _checked(args)
    profiles = {}
    if args.services:
        from balancer.app.capacity_run import load_profiles

        profiles = load_profiles(args.services)
        args.service = list(dict.fromkeys([*args.service, *profiles]))
    if args.prometheus and not args.service:
        raise InputError(None, "--service", None, "at least one service name (or --services FILE) with --prometheus")

    def slo_of(name: str) -> float:
        return args.slo if args.slo is not None else (profiles[name].slo_latency_s if name in profiles else 0.5)

    aimed_at(args.margin, {name: slo_of(name) for name in args.service or ["service"]})
    frames: dict[str, pd.DataFrame] = {}
    if args.csv:
        if len(args.service) > 1:
            raise InputError(args.csv, "--service", args.service, "one name: a CSV holds one service")
        frames[(args.service or ["service"])[0]] = from_csv(args.csv)
    else:
        try:
            frames = _from_prometheus(args)
        except TelemetryError as exc:
            print(f"gputide: error: {exc}", file=sys.stderr)
            return 1

    results = {name: estimate(f, slo_of(name), args.margin, settle_s) for name, f in frames.items()}
    current = {n: p.rps_per_replica for n, p in profiles.items()}
    suggested = {n: suggestion(current.get(n), c) for n, c in results.items()}
    with report_to(args.json):
        _print_report(results, current, suggested, slo_of)
        if args.write_services:
            write_profiles(args.services, args.write_services, suggested)
            print(f"\nwrote {args.write_services}: {args.services} with these rpsPerReplica")
    if args.json:
        write_json(args.json, {"margin": args.margin, "services": {
            n: {**c.as_dict(), "slo_s": slo_of(n), "profile_rps_per_replica": current.get(n),
                "suggested_rps_per_replica": suggested[n]} for n, c in results.items()}}, indent=2)
    return 0 if all(c.rps_per_replica is not None for c in results.values()) else 1
