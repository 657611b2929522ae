"""A loop's interval is at most a day (balancer.cmd._args.MOST_INTERVAL_S): `--interval 1e308` passed the finite and
positive check, ran one cycle, then crashed with an OverflowError (exit 1) where a lease, a deadline or a wait of a
few intervals overflowed (audit s32x5, item 1). Now it exits 2 at start, naming the flag, the value and the bound."""

from __future__ import annotations

import pytest

from balancer.cli import main
from tests.cli.test_cli_run_inputs import one_error_line

PROM = "http://127.0.0.1:1"   # nothing answers there: every case must fail before a query


@pytest.mark.parametrize("argv, flag", [
    pytest.param(["run", "--prometheus", PROM, "--once", "--dry-run", "--metrics-port", "0", "--interval", "1e308"],
                 "--interval", id="run"),
    pytest.param(["run", "--prometheus", PROM, "--once", "--dry-run", "--metrics-port", "0", "--interval", "25h"],
                 "--interval", id="run: a day and an hour"),
    pytest.param(["schedule", "--once", "--interval", "1e308"], "--interval", id="schedule"),
    pytest.param(["exporter", "--backend", "sim", "--port", "0", "--duration", "1", "--caps-interval", "1e308",
                  "--power-caps-file", "{tmp}/caps.json"], "--caps-interval", id="exporter"),
])
def test_an_interval_past_a_day_exits_2_naming_the_bound(tmp_path, capsys, argv, flag):
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"gputide: error: field '{flag}': invalid value ") and "24h" in line, line


def test_the_power_cap_agents_interval_is_bounded_by_the_caps_expiry(capsys):
    """Tighter than a day: a third of the caps' 15-minute expiry (tests/cli/test_cli_input_floors.py)."""
    assert main(["power-cap-agent", "--node", "n", "--interval", "1e308"]) == 2
    line = one_error_line(capsys)
    assert line.startswith("gputide: error: field '--interval': invalid value ") and "to 300s" in line, line


@pytest.mark.parametrize("text, seconds", [("24h", 86400.0), ("1d", 86400.0), ("30s", 30.0)])
def test_a_day_is_still_a_loop_interval(text, seconds):
    from balancer.cmd._args import MOST_INTERVAL_S, parse_interval

    assert parse_interval(text, most=MOST_INTERVAL_S) == seconds
