"""`gputide ... | head`: when the reader of stdout goes away, the CLI ends quietly with 141 (128 + SIGPIPE), as
coreutils do, never with a BrokenPipeError traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

# a command that prints far more than a pipe holds, run through cli.main as any subcommand is
SCRIPT = textwrap.dedent("""
    import argparse, sys
    from balancer import cli

    def chatty(args):
        for _ in range(200_000):
            print("x" * 80)
        return 0

    class Parser:
        def parse_args(self, argv):
            return argparse.Namespace(log_level="INFO", func=chatty)

    cli.build_parser = Parser
    sys.exit(cli.main([]))
""")


def test_a_closed_pipe_ends_the_cli_without_a_traceback():
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    proc.stdout.read(100)
    proc.stdout.close()   # the reader leaves, as `head` does
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == 141, err
    assert "Traceback" not in err and "BrokenPipeError" not in err, err
