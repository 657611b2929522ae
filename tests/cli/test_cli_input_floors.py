"""Values that passed "finite and positive" but make no sense (audit s33h4): `--interval 1e-320` ran the controller's,
the scheduler's and the power-cap agent's loops (and the exporter's `--caps-interval`) as busy loops, `calibrate
--slo 1e-320` (and `--margin 1e-320`, audit s33a2: it aims at margin x SLO) put every sample over the SLO, and the
power-cap agent's `--interval` could be a day, so a cap its controller stopped renewing stayed up to a day past its
15-minute expiry. Each now has a floor (and the agent a third of the expiry as its ceiling): exit 2, one line naming
the flag, the value and what is allowed."""

from __future__ import annotations

import pytest

from balancer.cli import main
from balancer.cmd.power_cap_agent import agent_interval
from balancer.errors import InputError
from tests.cli.test_cli_run_inputs import one_error_line

PROM = "http://127.0.0.1:1"   # nothing answers there: every case must fail before a query
RUN = ["run", "--prometheus", PROM, "--once", "--dry-run", "--metrics-port", "0"]
EXPORTER = ["exporter", "--backend", "sim", "--port", "0", "--duration", "1", "--power-caps-file", "{tmp}/caps.json"]
CAL = ["calibrate", "--csv", "{tmp}/calib.csv", "--service", "chat"]

REFUSED = [
    pytest.param([*RUN, "--interval", "1e-320"], "--interval", "'1e-320'", "from 0.05s up to 86400s", id="run"),
    pytest.param([*RUN, "--interval", "10ms"], "--interval", "'10ms'", "from 0.05s", id="run: 10ms"),
    pytest.param(["schedule", "--once", "--interval", "1e-320"], "--interval", "'1e-320'", "from 0.05s",
                 id="schedule"),
    pytest.param([*EXPORTER, "--caps-interval", "1e-320"], "--caps-interval", "1e-320", ">= 0.05 and <= 86400",
                 id="exporter"),
    pytest.param(["power-cap-agent", "--node", "n", "--interval", "1e-320"], "--interval", "'1e-320'",
                 "from 1s to 300s (a third of the power caps' 15-minute expiry)", id="power-cap-agent: a busy loop"),
    pytest.param(["power-cap-agent", "--node", "n", "--interval", "16m"], "--interval", "'16m'",
                 "from 1s to 300s", id="power-cap-agent: past the caps' expiry"),
    pytest.param(["power-cap-agent", "--node", "n", "--interval", "24h"], "--interval", "'24h'",
                 "from 1s to 300s", id="power-cap-agent: a day, allowed before"),
    pytest.param([*CAL, "--slo", "1e-320"], "--slo", "1e-320", ">= 0.001 and <= 3600", id="calibrate: a tiny SLO"),
    pytest.param([*CAL, "--slo", "7200"], "--slo", "7200.0", ">= 0.001 and <= 3600", id="calibrate: two hours"),
    pytest.param([*CAL, "--margin", "1e-320"], "--margin", "1e-320",
                 "margin x SLO is at least 0.001 s (--slo's floor): at least 0.002 for chat's SLO of 0.5 s",
                 id="calibrate: a tiny margin"),
    pytest.param([*CAL, "--slo", "0.001", "--margin", "0.5"], "--margin", "0.5", "at least 1 for chat's SLO of 0.001 s",
                 id="calibrate: a margin under the least SLO"),
]


@pytest.mark.parametrize(("argv", "flag", "value", "allowed"), REFUSED)   # value: as the line shows it
def test_a_value_past_its_floor_or_ceiling_exits_2_naming_flag_value_and_bounds(tmp_path, capsys, argv, flag, value,
                                                                                 allowed):
    (tmp_path / "calib.csv").write_text("timestamp,demand,replicas,p99\n")
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"gputide: error: field '{flag}': invalid value {value}; allowed: "), line
    assert allowed in line, line


@pytest.mark.parametrize(("text", "seconds"), [("1s", 1.0), ("10s", 10.0), ("5m", 300.0)])
def test_the_agent_still_takes_an_interval_from_a_second_to_five_minutes(text, seconds):
    assert agent_interval(text) == seconds


@pytest.mark.parametrize("text", ["999ms", "301s", "inf", "nan", "0", "soon"])
def test_the_agent_refuses_anything_else(text):
    with pytest.raises(InputError) as err:
        agent_interval(text)
    assert err.value.field == "--interval" and "1s to 300s" in err.value.allowed


def test_the_loops_keep_their_shortest_intervals_in_use():
    """tests/loop/test_loop_cli_scenario.py runs the controller at 200ms and the exporter's power-cap test reads
    every 50ms: the floor is no busy loop, not a speed limit."""
    from balancer.cmd._args import LEAST_INTERVAL_S, loop_interval, number

    assert loop_interval("200ms") == 0.2 and loop_interval("50ms") == LEAST_INTERVAL_S == 0.05
    assert number(0.05, "--caps-interval", LEAST_INTERVAL_S) == 0.05


def test_calibrates_slo_bounds_are_the_services_files():
    from balancer.app.capacity_run import _FIELDS
    from balancer.cmd.calibrate import SLO_RANGE_S

    assert _FIELDS["latencySloSeconds"][2:4] == SLO_RANGE_S


def test_calibrates_margin_floor_is_the_slos_for_each_services_own_slo(tmp_path, capsys):
    """The target is margin x SLO, each service's from its profile: 0.002 of a 0.5 s SLO is the least --slo, 1 ms."""
    from balancer.cmd.calibrate import aimed_at

    aimed_at(0.002, {"chat": 0.5})
    aimed_at(1.0, {"fast": 0.001})
    (tmp_path / "services.yaml").write_text("apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices:\n"
                                            "  - {name: chat, rpsPerReplica: 5, latencySloSeconds: 0.5}\n"
                                            "  - {name: fast, rpsPerReplica: 5, latencySloSeconds: 0.01}\n")
    assert main(["calibrate", "--prometheus", PROM, "--services", str(tmp_path / "services.yaml"),
                 "--margin", "0.05"]) == 2   # before any query: nothing answers at PROM
    line = one_error_line(capsys)
    assert "invalid value 0.05" in line and "at least 0.1 for fast's SLO of 0.01 s" in line, line
