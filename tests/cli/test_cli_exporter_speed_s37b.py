"""`gputide exporter --speed` has a ceiling (audit s37, h11): each scrape first steps the simulator up to wall-clock
time x speed, so `--speed 1e300 --duration 15` made every scrape 503 ("collection timed out") and still exited 0,
and `--speed 100000` answered nothing within 10 s. Above `MOST_SPEED` the command exits 2 naming the flag, the value
and the range before it builds a fleet or binds a port."""

from __future__ import annotations

import pytest

from balancer.cli import main
from balancer.cmd.exporter import MOST_SPEED
from tests.cli.test_cli_run_inputs import one_error_line

BASE = ["exporter", "--backend", "sim", "--port", "0", "--duration", "0.1"]


@pytest.mark.parametrize("value", ["1e300", "100000", "1001"])
def test_a_speed_the_simulator_cannot_keep_up_with_exits_2(capsys, value):
    code = main([*BASE, "--speed", value])
    line = one_error_line(capsys)
    assert code == 2, line
    assert line.startswith(f"gputide: error: field '--speed': invalid value {float(value)!r}; allowed: a finite "
                           f"number >= 0 and <= {MOST_SPEED:g}"), line
    assert "scrape" in line, line   # why the ceiling


def test_the_ceiling_is_said_in_the_help(capsys):
    with pytest.raises(SystemExit):
        main(["exporter", "--help"])
    assert f"0 to {MOST_SPEED:g}" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("value", ["0", "60", f"{MOST_SPEED:g}"])
def test_speeds_up_to_the_ceiling_still_serve(capsys, value):
    assert main([*BASE, "--speed", value]) == 0
    assert "serving 256 GPUs" in capsys.readouterr().out
