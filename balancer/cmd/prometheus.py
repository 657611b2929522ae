"""`gputide prometheus`: write or run the project-managed Prometheus.

    gputide prometheus --config-only --targets 127.0.0.1:9835,127.0.0.1:9400 [--out DIR]
    gputide prometheus --run --targets 127.0.0.1:9835 [--controller 127.0.0.1:9100]

`--config-only` prints prometheus.yml (or, with --out, writes DIR/prometheus.yml and DIR/rules/*.yaml so the
folder is self-contained); `--run` starts the real binary on a free loopback port and stays in the foreground,
printing the URL, until Ctrl-C.
"""

from __future__ import annotations

import argparse
import signal
import socket
import sys
import time
from pathlib import Path

import yaml

from balancer.cmd._args import distinct, given, output_dir
from balancer.cmd._rulefile import check_rule_file
from balancer.cmd.run import cluster_name
from balancer.errors import InputError, items
from balancer.telemetry.promserver import (
    PortInUse,
    PrometheusServer,
    PrometheusServerError,
    Target,
    build_config,
    default_rule_files,
    parse_duration,
    write_config,
)
from balancer.yamlfile import read_yaml

_ADDRESS_HELP = "host:port[,host:port...]"
# --scrape-interval's range. Below a second Prometheus scrapes (and evaluates the rules) faster than an exporter
# collects. A reading's age reaches the interval plus up to 30 s (the rules' 15 s evaluation and the scrape itself:
# `gputide run --stale-after` wants "at least the scrape interval + 30s"); above 90 s that outgrows, between scrapes,
# the 120 s at which GpuTelemetryStale fires (fixed in rules/) and past which `gputide schedule` (--stale-after 120 s
# at most) and `gputide run` (its default --stale-after, the default policy's maxTelemetryAgeS) take every GPU for
# stale and hold still. (Past 5 m, Prometheus's lookback, instant queries would not even find the series.)
LEAST_SCRAPE_S, MOST_SCRAPE_S = 1.0, 90.0
SCRAPE_ALLOWED = (f"a Prometheus duration from {LEAST_SCRAPE_S:g}s to {MOST_SCRAPE_S:g}s, like 5s, 15s, 1m (longer, "
                  "readings outgrow the 120 s after which the controller holds still and GpuTelemetryStale fires)")


def _addresses(text: str, field: str) -> list[str]:
    """host:port items of a comma-separated flag, each once: an empty item (`a:1,,b:2`, a trailing comma) was
    dropped without a word, and a repeated one written twice into the job (scraped twice, each series doubled)."""
    addresses = items(text, field, _ADDRESS_HELP)
    if not addresses:
        raise InputError(None, field, text, _ADDRESS_HELP)
    for address in addresses:
        host, _, port = address.rpartition(":")
        if not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise InputError(None, field, address, _ADDRESS_HELP)
    distinct(addresses, field, values=f"addresses {_ADDRESS_HELP}")
    return addresses


def _targets(args: argparse.Namespace) -> list[Target]:
    targets = [Target(args.job, address) for address in _addresses(args.targets, "--targets")]
    if args.controller:
        targets += [Target("gputide-controller", a) for a in _addresses(args.controller, "--controller")]
    return targets


def _rule_files(args: argparse.Namespace) -> list[Path]:
    if args.rules is None:
        return default_rule_files()
    if not args.rules:   # `--rules` with no file (nargs='*', a glob that matched nothing) took the default rules
        raise InputError(None, "--rules", "", "one or more rule files (leave --rules out for the repository's "
                         "rules/*.yaml)")
    files = [Path(p) for p in args.rules]
    names: dict[str, Path] = {}
    for path in files:
        if not path.is_file():
            raise InputError(None, "--rules", str(path), "existing rule files (YAML)")
        # each is copied to rules/<name> beside the config: a second file of one name overwrote the first, which
        # was then loaded twice (its groups' names repeated) while the other's rules were silently lost
        if names.setdefault(path.name, path) != path:
            raise InputError(None, "--rules", str(path), f"rule files of distinct names ({names[path.name]} has "
                             "this one's: rename one)")
        # unreadable, not UTF-8, not YAML or not groups of rules: said here, not by a traceback or Prometheus' log
        check_rule_file(read_yaml(path, "Prometheus rule"), str(path))
    return files


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "prometheus", help="write or run a Prometheus that scrapes gputide's targets with rules/ loaded",
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--config-only", action="store_true", help="print (or write with --out) the config")
    mode.add_argument("--run", action="store_true", help="run Prometheus in the foreground until Ctrl-C")
    parser.add_argument("--targets", required=True, help=f"exporter addresses, {_ADDRESS_HELP}")
    parser.add_argument("--job", type=given("--job", "a job name"), default="gputide-exporter",
                        help="job name of the --targets (default: %(default)s)")
    parser.add_argument("--controller", default="", help=f"controller metrics endpoints, {_ADDRESS_HELP}")
    parser.add_argument("--cluster", default="local", help="value of the cluster label on every target")
    parser.add_argument("--scrape-interval", default="5s",
                        help=f"scrape and rule evaluation interval, {LEAST_SCRAPE_S:g}s to {MOST_SCRAPE_S:g}s "
                             "(default 5s; longer, readings age past the controller's 120 s staleness limit)")
    parser.add_argument("--rules", type=given("--rules"), nargs="*",
                        help="one or more rule files (left out: the repository's rules/*.yaml)")
    parser.add_argument("--out", type=given("--out"),
                        help="with --config-only: directory to write; with --run: data directory")
    parser.add_argument("--port", type=int, default=None, help="with --run: port (default: a free one)")
    parser.add_argument("--retention", default=None,
                        help="with --run: how long the data is kept, e.g. 7d (default 1d, or 15d with --out: a "
                             "data directory kept between runs holds what calibrate's 7d and the burn rates read)")
    parser.set_defaults(func=run)


def _scrape_interval(text: str) -> float:
    """--scrape-interval in seconds, `LEAST_SCRAPE_S` to `MOST_SCRAPE_S`: 1ms, 10m and 1000d were all written into
    prometheus.yml (`--config-only`) or run."""
    try:
        seconds = parse_duration(text)
    except ValueError as exc:
        raise InputError(None, "--scrape-interval", text, SCRAPE_ALLOWED) from exc
    if not LEAST_SCRAPE_S <= seconds <= MOST_SCRAPE_S:
        raise InputError(None, "--scrape-interval", text, SCRAPE_ALLOWED)
    return seconds


def run(args: argparse.Namespace) -> int:
    _scrape_interval(args.scrape_interval)
    cluster_name(args.cluster)   # the label the controller's --cluster selects by: the same values
    if args.port is not None and not 0 < args.port <= 65535:
        raise InputError(None, "--port", args.port, "1..65535")
    for flag, value in (("--port", args.port), ("--retention", args.retention)):
        if args.config_only and value is not None:  # flags of the running binary: prometheus.yml holds neither
            raise InputError(None, flag, value, "only with --run (prometheus.yml holds no port or retention: pass "
                             "--web.listen-address / --storage.tsdb.retention.time to your Prometheus)")
    if args.retention is not None:
        try:
            parse_duration(args.retention)
        except ValueError as exc:
            raise InputError(None, "--retention", args.retention, "a duration like 12h, 7d, 30d") from exc
    if args.run and args.port is not None:
        _free(args.port)
    if args.out:
        output_dir(args.out, "--out")
    targets, rules = _targets(args), _rule_files(args)
    options = {"scrape_interval": args.scrape_interval, "cluster": args.cluster}
    if args.config_only:
        if args.out:
            path = write_config(args.out, targets, rules, **options)
            print(f"wrote {path} and {len(rules)} rule file(s) under {path.parent / 'rules'}")
        else:  # printed: point at the rule files where they are
            config = build_config(targets, [str(p.resolve()) for p in rules], **options)
            sys.stdout.write(yaml.safe_dump(config, sort_keys=False))
        return 0
    return _run_foreground(args, targets, rules)


def _free(port: int) -> None:
    """An explicit --port must be free on 127.0.0.1: said here (exit 2), not as Prometheus' startup log (exit 1).
    SO_REUSEADDR as Prometheus (Go) binds: a port the previous run left in TIME_WAIT is free to it."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind(("127.0.0.1", port))
        except OSError as exc:
            raise InputError(None, "--port", port, "a free port on 127.0.0.1 (or no --port: a free one is chosen)",
                             str(exc)) from exc


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


# `kill` (SIGTERM) and a closed terminal or SSH session (SIGHUP) stop Prometheus as Ctrl-C does. Under SIGHUP's
# default Python died at once and left Prometheus running, which takes SIGHUP as "reload the config": an orphan
# holding the port and the data directory.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP)


def _run_foreground(args: argparse.Namespace, targets: list[Target], rules: list[Path]) -> int:
    previous = {sig: signal.signal(sig, _interrupt) for sig in _STOP_SIGNALS}
    retention = args.retention or ("15d" if args.out else "1d")
    try:
        server = PrometheusServer(targets, rules, scrape_interval=args.scrape_interval, cluster=args.cluster,
                                  port=args.port, directory=args.out, retention=retention)
        with server:
            print(f"Prometheus ready at {server.url} (config {server.config_path}, data kept {retention}); "
                  "Ctrl-C to stop", flush=True)
            while server.running:
                time.sleep(0.5)
            print(f"prometheus exited:\n{server.log_tail()}", file=sys.stderr)
            return 1
    except PortInUse as exc:  # taken between the check and Prometheus' bind
        raise InputError(None, "--port", args.port, "a free port on 127.0.0.1", str(exc)) from exc
    except PrometheusServerError as exc:
        print(f"gputide: error: {exc}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        return 0
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
