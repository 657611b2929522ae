"""`gputide forecast backtest`: rolling-origin backtest of the demand forecasters on a trace.

    gputide forecast backtest --trace PATH [--format csv|servegen|requests] [--step 10min]
                              [--horizons 1h,4h,24h] [--models a,b,...] [--timezone ZONE] [--json OUT]

Prints one row per model and horizon (MAE, MASE against seasonal naive and persistence, pinball loss, p90
coverage, fit time); a horizon is a whole number of the trace's steps (else exit 2); `--json` writes the same
table plus run details (`--json -`: to standard output, the table then to standard error). `--timezone` (an IANA
name, default UTC) is the local time in which seasonal naive, profile, GBM and auto read the demand's days and weeks.
"""

from __future__ import annotations

import argparse
import math
import sys
import time

import pandas as pd

from balancer.cmd._args import (
    NegativeValues,
    distinct,
    given,
    number,
    output_file,
    report_to,
    write_json,
)
from balancer.errors import InputError, items

HORIZONS = "1h,4h,24h"   # --horizons unless given
HORIZONS_ALLOWED = "comma-separated durations such as 1h,4h,24h"


def register(subparsers) -> None:
    p = subparsers.add_parser("forecast", help="demand forecasting tools")
    # NegativeValues: `--horizons -1h` reaches the check below (exit 2 naming the flag), not argparse's 'expected
    # one argument'
    sub = p.add_subparsers(dest="forecast_command", metavar="ACTION", parser_class=NegativeValues)
    b = sub.add_parser("backtest", help="rolling-origin backtest of the forecasters on a demand trace")
    b.add_argument("--trace", type=given("--trace"), required=True, help="CSV file, ServeGen folder or per-request CSV")
    b.add_argument("--format", default="csv", choices=["csv", "servegen", "requests"])
    b.add_argument("--step", default=None, help="resample to this step (default: the trace's own; 1min for requests)")
    b.add_argument("--horizons", default=None,
                   help=f"comma-separated durations, each a whole number of the trace's steps (default {HORIZONS})")
    b.add_argument("--models", default=None, help="comma-separated model names (default: all)")
    b.add_argument("--origin", default=None, help="servegen: timestamp of window_start_s = 0 (default 2024-01-01Z)")
    b.add_argument("--min-train-days", type=float, default=None,
                   help="history before the first scored origin (default 7, or half the trace if shorter)")
    b.add_argument("--stride", type=int, default=None, help="score every N-th origin (default 1: every step)")
    b.add_argument("--timezone", default="UTC", metavar="ZONE",
                   help="IANA time zone of the demand's day and week, e.g. Europe/Berlin (default UTC)")
    b.add_argument("--json", type=given("--json"), default=None, metavar="OUT",
                   help="also write the table as JSON (- for stdout)")
    b.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _durations(args: argparse.Namespace) -> list[float]:
    """--step checked (named as the flag, before the trace is read) and --horizons as seconds."""
    from balancer.forecast.traces import parse_step

    if args.step is not None:
        parse_step(args.step, field="--step")
    args.horizons_given, args.horizons = args.horizons is not None, HORIZONS if args.horizons is None else args.horizons
    texts = items(args.horizons, "--horizons", HORIZONS_ALLOWED)
    horizons = [parse_step(h, field="--horizons").total_seconds() for h in texts]
    if not horizons:
        raise InputError(None, "--horizons", args.horizons, HORIZONS_ALLOWED)
    distinct(texts, "--horizons", horizons)
    return horizons


def _whole_steps(args: argparse.Namespace, horizons: list[float], step: float | None) -> None:
    """Each horizon a whole number of the trace's steps, at least one, no two of the same steps (the library's rule,
    `backtest.whole_steps`), refused naming it as written on the command line: 90min between two hourly steps was
    scored as 2h, and the library's ValueError read as a trace too short."""
    from balancer.forecast.backtest import HorizonError, whole_steps

    if step is None:
        return
    texts = items(args.horizons, "--horizons", HORIZONS_ALLOWED)
    try:
        whole_steps(horizons, step, texts)
    except HorizonError as exc:
        # a horizon of the default, which the user never typed, is said to be one: the fix is to give --horizons
        shown = texts[exc.index] if args.horizons_given else f"{texts[exc.index]} (the default --horizons {HORIZONS})"
        allowed = exc.allowed + (f", here --step {args.step}" if args.step else "") + (
            "; --step resamples the trace to another" if exc.between and not args.step else "")
        raise InputError(args.trace, "--horizons", shown, allowed + (
            "; give --horizons of such durations" if not args.horizons_given else "")) from exc


MAX_STEP_PAIRS = 1e9   # the outage mask reads each step against the day around it: 7.5e9 (1s, a day) took 60 s
MAX_ORIGINS = 50_000   # forecasts made per model: about 2 ms each for the baselines alone, 30 ms for all models


def _bounded(args: argparse.Namespace, y: pd.Series, step: float | None, horizons: list[float] = ()) -> None:
    """A backtest on steps mostly empty, or that would run for hours, is refused before it starts: `--step 1s` on a
    600 s trace made 1.8M steps (under the loader's MAX_STEPS), all but one in 600 empty, and ran for over 400 s."""
    import numpy as np

    if step is None:
        return
    given_step = f"{args.step}" if args.step else f"{step:g}s (the trace's own step)"
    seen = np.flatnonzero(y.notna().to_numpy())
    gap = int(np.median(np.diff(seen))) if seen.size > 1 else 1
    # a requests log's steps are counts, never empty: only csv and servegen get here. The trace's own step is the
    # one its loader uses without --step: a trace with empty values loads at it, its observed steps further apart
    own, what = y.attrs.get("own_step_s"), y.attrs.get("own_step_what", "the median gap between its observed steps")
    if args.step and gap > 1 and (own is None or step < own):
        own = gap * step if own is None else own
        raise InputError(args.trace, "--step", args.step, f"a step no finer than the trace's own ({own:g}s, {what}): "
                         f"a finer one leaves {gap - 1} of every {gap} steps empty")
    day = max(round(86400 / step), 3)
    if len(y) * day > MAX_STEP_PAIRS:
        least = _least_step(len(y) * step, args.stride, horizons)
        raise _least_refused(args, given_step, least, "the backtest's " + _work(args), horizons,
                             detail=f"{len(y)} steps x {day} a day")
    origins = -(-len(y) // args.stride)
    if origins > MAX_ORIGINS:
        least = -(-len(y) // MAX_ORIGINS)
        stride = args.stride if args.stride_given else f"{args.stride} (the default)"
        raise InputError(args.trace, "--stride", stride, f"a --stride of at least {least}, or a coarser --step: "
                         f"a backtest makes at most {MAX_ORIGINS} forecasts per model (each origin a forecast; "
                         f"--stride N scores every N-th)", detail=f"{len(y)} steps of {given_step}")


def _least_step(span: float, stride: int, horizons: list[float] = ()) -> int:
    """The least whole --step in seconds that keeps a trace spanning `span` seconds under both limits: its steps
    against the day around each (steps ~ span / step, day ~ 1 / step: a square root) and its origins at `stride`,
    and divides every one of `horizons` (whole seconds) where one such step is at most a horizon: the pairs' least
    alone, suggested on a trace over 2.5 days, was refused next for its origins (21 days at 13 s: 139,568 origins),
    and 37 s next for --horizons 1h. Counted with a step more than the span gives, where the resampled trace's ends
    fall."""
    least = max(math.ceil(math.sqrt(span * 86400 / MAX_STEP_PAIRS)), math.ceil(span / (MAX_ORIGINS * stride)))
    while True:
        steps = int(span // least) + 2
        if steps * max(round(86400 / least), 3) <= MAX_STEP_PAIRS and -(-steps // stride) <= MAX_ORIGINS:
            return _dividing(least, horizons)
        least += 1


def _too_long(args: argparse.Namespace, exc, horizons: list[float]) -> InputError:
    """The loader's refusal of a trace too long at --step (or at its own step, without one: `exc`, a `TooLong`),
    naming the step this backtest runs it at: the coarsest of the loader's least, `_least_step`'s (the work
    `_bounded` allows) and the trace's own (a finer --step is refused), then dividing the horizons where one does. The
    loader's least alone was refused next: 'at least 2 seconds loads it' on a daily trace, then 'no finer than the
    trace's own (86400s)'; on a 1s trace with one row 100 days on, then 'at least 180s' (audit a3)."""
    from balancer.forecast.traces import MAX_STEPS

    own = exc.own_step_s
    bounded = _least_step(exc.span_s, args.stride, horizons)
    least = _dividing(max(exc.least_s, bounded, math.ceil(own or 0)), horizons)
    given_step = args.step if args.step else f"{60.0 if own is None else own:g}s (the trace's own step)"
    why = f"the loader resamples it at {exc.least_s}s or coarser (at most {MAX_STEPS} steps), the backtest's "
    why += _work(args)
    if own is not None and math.ceil(own) > max(exc.least_s, bounded):   # `_bounded` refuses one leaving steps empty
        why += f", and the trace's own step is {own:g}s: a finer --step may leave steps empty and be refused"
    return _least_refused(args, given_step, least, why, horizons, detail=exc.detail)


def _work(args: argparse.Namespace) -> str:
    """The backtest's bounds on its work, as its refusals of a --step too fine name them."""
    return (f"outage mask reads each step against the day around it (at most {MAX_STEP_PAIRS:g} such pairs) and it "
            f"makes at most {MAX_ORIGINS} forecasts per model (here at --stride {args.stride})")


def _least_refused(args: argparse.Namespace, given_step: str, least: int, why: str, horizons: list[float],
                   detail: str) -> InputError:
    """--step (`given_step`) refused naming `least`, the least step the backtest runs the trace at (`why`). With
    horizons, each a whole number of steps, a coarser step than `least` may not divide them: '--horizons then whole
    multiples of it'. Said by both refusals, the too-long trace's and the backtest's work's, wherever horizons are
    given: a 3-day 1s trace with --horizons 1001s was told 'at least 7s' (7 divides 1001), and --step 8 refused next
    for --horizons."""
    if horizons:
        why += "; --horizons then whole multiples of it"
    return InputError(args.trace, "--step", given_step, f"a --step of at least {least}s over this trace's span: {why}",
                      detail=detail)


def _dividing(least: int, horizons: list[float]) -> int:
    """The least step from `least` on that divides every horizon given in whole seconds (`least` when none does
    within the shortest horizon: the horizons' own error then says what they need)."""
    whole = [int(h) for h in horizons if float(h).is_integer()]
    for s in range(least, min(whole, default=least) + 1):
        if all(h % s == 0 for h in whole):
            return s
    return least


def _min_train_days(args: argparse.Namespace, y: pd.Series, step: float | None) -> float:
    """--min-train-days as given, or 7; the backtest scores from at most half the trace, so a value past that was
    silently cut to it: given on the command line, it is refused instead."""
    if args.min_train_days is None:
        return 7.0
    half_days = len(y) // 2 * (step or 0.0) / 86400.0
    if step and args.min_train_days > half_days:
        raise InputError(args.trace, "--min-train-days", args.min_train_days,
                         f"at most half the trace's span ({half_days:.4g} days)")
    return args.min_train_days


def _strict(value):
    """NaN and infinities as null: json writes them as bare NaN/Infinity, which strict parsers (jq, JavaScript)
    refuse; a score without a value (MASE against an exact baseline) is then null, printed nan in the table."""
    if isinstance(value, dict):
        return {k: _strict(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_strict(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def run(args: argparse.Namespace) -> int:
    from balancer.config import check_timezone
    from balancer.forecast import MODELS, load_demand
    from balancer.forecast.backtest import backtest, format_table
    from balancer.forecast.traces import TooLong

    horizons = _durations(args)
    check_timezone(args.timezone, "--timezone")
    models_allowed = "comma-separated model names: " + ", ".join(sorted(MODELS))
    models = items(args.models, "--models", models_allowed) if args.models is not None else None
    if models == []:
        raise InputError(None, "--models", args.models, models_allowed)
    for m in models or []:
        if m not in MODELS:
            raise InputError(None, "--models", m, ", ".join(sorted(MODELS)))
    distinct(models or [], "--models")
    args.stride_given, args.stride = args.stride is not None, 1 if args.stride is None else args.stride
    if args.stride < 1:
        raise InputError(None, "--stride", args.stride, "an integer >= 1")
    if args.min_train_days is not None:
        number(args.min_train_days, "--min-train-days", 0, unit=" (days)")
    if args.origin is not None and args.format != "servegen":
        raise InputError(args.trace, "--origin", args.origin, "no --origin: only --format servegen reads one")
    output_file(args.json, "--json", {"--trace": args.trace})
    try:
        y = load_demand(args.trace, args.format, args.step, origin=args.origin)
    except TooLong as exc:
        raise _too_long(args, exc, horizons) from exc
    step = pd.Timedelta(y.index.freq).total_seconds() if y.index.freq is not None else None
    _bounded(args, y, step, horizons)
    _whole_steps(args, horizons, step)
    min_train_days = _min_train_days(args, y, step)
    t0 = time.perf_counter()
    try:
        scores, details = backtest(y, models=models, horizons_s=horizons, min_train_days=min_train_days,
                                   stride=args.stride, tz=args.timezone)
    except ValueError as exc:
        raise InputError(args.trace, "trace", f"{len(y)} steps", "a longer trace", detail=str(exc)) from exc
    details["seconds"] = round(time.perf_counter() - t0, 2)
    with report_to(args.json):
        print(f"backtest of {args.trace}: {len(y)} steps of {details['step_s']:g}s, "
              f"{details['origins']} scored origins from {details['first_scored']}, {details['seconds']} s"
              + (f", calendar in {args.timezone}" if args.timezone != "UTC" else ""))
        print(format_table(scores))
    for name, why in details["fallbacks"].items():
        print(f"note: {name} fell back to persistence (its rows score that) at {why}", file=sys.stderr)
    if args.json:
        doc = {"trace": args.trace, "details": details, "scores": [s.as_dict() for s in scores]}
        write_json(args.json, _strict(doc), indent=2, default=str, allow_nan=False)
    return 0
