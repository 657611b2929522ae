"""`gputide dashboards build|render`: generate the Grafana dashboards, or draw them to PNG without Grafana.

`build` regenerates `dashboards/*.json` from the Python sources (a source checkout with the dev extras:
grafana-foundation-sdk). `render` runs every panel's queries against a Prometheus and writes one PNG per dashboard;
it exits 1 when Prometheus cannot be reached, and with `--require-data` when a panel had no data (a per-MIG-instance
panel on a Prometheus without any MIG GPU is expected to be empty and does not count, nor does a panel of a type that
never queries, such as a text panel; a graph or stat without queries counts, as Grafana shows it "No data"). Bad input
exits 2 naming the flag or the file and field: a dashboard file without what the renderer reads (a string title, a
list of panels, each with its type, or a library panel reference, drawn as a placeholder, and its place on the grid;
a collapsed row's panels are checked, queried and drawn as the others, where Grafana opens them, and every row's
title, drawn as its header, a string and its place, where it has one, on the grid), a --step that needs more points
than Prometheus answers, a `build --check` against a folder that is not there.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from balancer.cmd._args import given
from balancer.errors import InputError, TelemetryUnavailable


def run_build(args: argparse.Namespace) -> int:
    from balancer.cmd._args import output_dir

    if args.out:   # a file there (or above it) was a FileExistsError traceback from mkdir
        output_dir(args.out, "--out")
    if args.out and args.check and not Path(args.out).is_dir():   # was "out of date", exit 1, for each dashboard
        raise InputError(None, "--out", args.out, "an existing folder: --check compares the dashboards' JSON files "
                         "there with what the Python sources generate", "no such folder")
    try:
        from dashboards import build
    except ImportError as exc:
        print(f"gputide dashboards build needs a source checkout with the dev extras ({exc})", file=sys.stderr)
        return 1
    argv = ["--out", str(args.out)] if args.out else []
    try:
        return build.main(argv + (["--check"] if args.check else []))
    except (OSError, UnicodeDecodeError) as exc:   # a folder that cannot be made or written, a JSON file not text
        raise InputError(None, "--out", args.out or str(build.HERE), "a folder this process can create, read and "
                         "write the dashboards' JSON files in", str(exc)) from exc


def run_render(args: argparse.Namespace) -> int:
    from balancer import dashboards_render as dr
    from balancer.cmd._args import epoch, output_dir
    from balancer.cmd.run import prometheus_url

    prometheus_url(args.prometheus)
    output_dir(args.out, "--out")
    range_s = dr.parse_duration(args.range)
    # `is not None`: `--step ''` is a step given and unusable (refused naming it), not the default range / 300
    step = dr.parse_duration(args.step, "--step") if args.step is not None else None
    if step is not None:
        dr.check_points(range_s, step, args.step, args.range)
    try:
        report = dr.render(args.prometheus, Path(args.out),
                           dashboards_dir=Path(args.dashboards_dir or dr.DEFAULT_DASHBOARDS_DIR),
                           uid=args.dashboard, range_s=range_s, end=epoch(args.end, "--end"), step=step)
    except TelemetryUnavailable as exc:
        print(f"gputide: error: {exc}", file=sys.stderr)
        return 1
    for path in report.written:
        print(path)
    for name, failed in report.failed_variables.items():   # drawn without their options, as Grafana draws them
        for variable, error in failed:
            print(f"{name}: variable {variable!r}: its query failed, drawn without its options: {error}",
                  file=sys.stderr)
    empty = {name: panels for name, panels in report.empty_panels.items() if panels}
    for name, panels in empty.items():
        print(f"{name}: no data for {', '.join(panels)}", file=sys.stderr)
    for name, pairs in report.not_applicable_why.items():  # not a failure of --require-data: nothing to show here
        by_reason: dict[str, list[str]] = {}   # each panel with its own reason, titles shared or not
        for title, why in pairs:
            by_reason.setdefault(why, []).append(title)
        for reason, said in by_reason.items():
            print(f"{name}: no data, as expected here ({reason}), for {', '.join(said)}", file=sys.stderr)
    for name, panels in report.library_panels.items():  # their queries live in Grafana's library, not in the file
        print(f"{name}: library panels drawn as placeholders: {', '.join(panels)}", file=sys.stderr)
    return 1 if empty and args.require_data else 0


def register(subparsers: argparse._SubParsersAction) -> None:
    # nothing heavy here: every gputide command builds every parser, and the renderer imports matplotlib, which
    # needs a writable home the exporter and the power-cap agent (read-only root filesystem) do not have
    parser = subparsers.add_parser("dashboards", help="build the Grafana dashboards or render them to PNG")
    sub = parser.add_subparsers(dest="dashboards_command", metavar="ACTION", required=True)
    b = sub.add_parser("build", help="regenerate dashboards/*.json from the Python sources")
    b.add_argument("--out", type=given("--out", "a folder"), default=None,
                   help="output directory (default: dashboards/)")
    b.add_argument("--check", action="store_true",
                   help="exit 1 if the JSON in --out (an existing folder) is out of date")
    b.set_defaults(func=run_build)
    r = sub.add_parser("render", help="draw each dashboard's panels to PNG from a Prometheus")
    r.add_argument("--prometheus", required=True, help="Prometheus base URL, e.g. http://127.0.0.1:9090")
    r.add_argument("--out", type=given("--out", "a folder"), required=True, help="directory for the PNGs")
    r.add_argument("--dashboard", default=None, help="render only the dashboard with this uid")
    r.add_argument("--range", default="1h", help="time range ending at --end (default 1h)")
    r.add_argument("--end", default="now", help="end of the range: now, unix seconds or ISO 8601")
    r.add_argument("--step", default=None, help="query step (default: range / 300)")
    r.add_argument("--dashboards-dir", type=given("--dashboards-dir", "a folder"), default=None,
                   help="where the JSON files are (default: $GPUTIDE_DASHBOARDS_DIR, "
                        "else the repository's dashboards/)")
    r.add_argument("--require-data", action="store_true",
                   help="exit 1 if any panel had no data (a text panel and the like, which runs no queries, does not "
                        "count)")
    r.set_defaults(func=run_render)
