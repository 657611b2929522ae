"""`gputide` command line: the only place where I/O objects are built.

Each sub-command lives in its own module under `balancer.cmd` and exposes
`register(subparsers)`; the parser it adds sets `func(args) -> int`.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import os
import pkgutil
import sys

from balancer import __version__
from balancer.errors import EXIT_INPUT_ERROR, InputError


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gputide", description="Keep GPU fleets busy and cool.")
    parser.add_argument("--version", action="version", version=f"gputide {__version__}")
    parser.add_argument("--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"])
    import balancer.cmd as cmd_pkg
    from balancer.cmd._args import NegativeValues

    # every command's parser reads `--interval -30s` as the value -30s, so the command's own check names the flag
    # and what is allowed (exit 2) instead of argparse's 'expected one argument'
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=NegativeValues)

    for info in sorted(pkgutil.iter_modules(cmd_pkg.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"balancer.cmd.{info.name}")
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(logging, args.log_level), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    if not getattr(args, "func", None):
        parser.print_help()
        return EXIT_INPUT_ERROR
    try:
        return int(args.func(args) or 0)
    except InputError as exc:
        print(f"gputide: error: {exc}", file=sys.stderr)
        return EXIT_INPUT_ERROR
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:   # `gputide ... | head`: the reader left; say nothing more, as coreutils do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())   # no second error when Python flushes stdout
        return 141   # 128 + SIGPIPE


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
