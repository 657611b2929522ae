"""`gputide exporter --collect-timeout / --serve-stale-for`: the scrape's wait for a collection and how long the last
complete one may be served past it reach the probes' `CollectHealth`; a timeout not under --stuck-after, or not a
duration, exits 2 naming the flag."""

from __future__ import annotations

import argparse

import pytest

from balancer.cli import main
from balancer.cmd import exporter as exporter_cmd


def parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    exporter_cmd.register(parser.add_subparsers())
    return parser.parse_args(["exporter", *argv])


def test_the_flags_reach_the_health_tracker() -> None:
    assert exporter_cmd.collect_timeouts(parsed()) == {"stuck_after_s": 300.0, "collect_timeout_s": 8.0,
                                                       "serve_stale_s": 30.0}
    got = exporter_cmd.collect_timeouts(parsed("--collect-timeout", "20s", "--serve-stale-for", "0s",
                                               "--stuck-after", "1m"))
    assert got == {"stuck_after_s": 60.0, "collect_timeout_s": 20.0, "serve_stale_s": 0.0}


@pytest.mark.parametrize("argv, flag", [
    (["--collect-timeout", "5m"], "--collect-timeout"),          # not under the default --stuck-after (5m)
    (["--collect-timeout", "30s", "--stuck-after", "20s"], "--collect-timeout"),
    (["--collect-timeout", "0.5s"], "--collect-timeout"),
    (["--collect-timeout", "soon"], "--collect-timeout"),
    (["--serve-stale-for", "-1s"], "--serve-stale-for"),
])
def test_bad_values_exit_2_naming_the_flag(capsys, argv, flag) -> None:
    assert main(["exporter", "--port", "0", "--duration", "0.1", *argv]) == 2
    assert flag in capsys.readouterr().err
