"""Flags that parsed but could not work, refused at start with exit code 2 and one line naming the flag, the value
and what is allowed:

* `gputide run --forecast-history` had no upper bound: a typo like 1400d read and fitted years of demand at a
  coarse step, although the forecaster keeps 28 days and drops the rest;
* `gputide run --emergency-stop-file` in a missing folder (a typo, a volume not mounted) named a file the operator
  could never create where the controller looks, so the emergency stop silently never took;
* `gputide forecast backtest --horizons -1h` was read by argparse as an option ('expected one argument'), so the
  check naming the flag and what it allows never ran.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from balancer.cli import main
from balancer.cmd import run as run_cmd
from balancer.cmd._args import NegativeValues
from tests.cli.test_cli_run_inputs import RUN, capacity_files, metrics, one_error_line, parse

DAY_S = 86400.0


@pytest.mark.parametrize("text", ["29d", "1400d", "700h", "2419201s"])
def test_a_forecast_history_longer_than_the_forecaster_keeps_exits_2(tmp_path, capsys, text):
    assert main(RUN + capacity_files(tmp_path) + ["--forecast-history", text]) == 2
    line = one_error_line(capsys)
    assert f"field '--forecast-history': invalid value '{text}'; allowed: a finite positive duration up to 28d" \
        in line, line


@pytest.mark.parametrize("text, days", [("28d", 28.0), ("672h", 28.0), ("14d", 14.0), ("12h", 0.5)])
def test_a_forecast_history_the_forecaster_keeps_is_read_in_full(tmp_path, text, days):
    rec = run_cmd.build_reconciler(parse(capacity_files(tmp_path) + ["--forecast-history", text]), metrics())
    assert rec.forecaster.history.days == days


def test_the_bound_is_what_the_forecaster_keeps(tmp_path):
    """The forecaster built for the loop drops demand older than the bound, so reading more would be wasted."""
    rec = run_cmd.build_reconciler(parse(capacity_files(tmp_path)), metrics())
    online = rec.forecaster.online
    assert online.history * online.step_s == run_cmd.MOST_FORECAST_HISTORY_D * DAY_S == 28 * DAY_S


@pytest.mark.parametrize("where, why", [
    ("{tmp}/no/such/STOP", "no such folder"),
    ("{tmp}/file/STOP", "under a file, not a folder"),
    ("{tmp}", "a folder"),
], ids=["a missing folder", "under a file", "a folder"])
def test_an_emergency_stop_file_that_can_never_be_seen_exits_2_before_any_work(tmp_path, capsys, where, why):
    (tmp_path / "file").write_text("")
    path = where.replace("{tmp}", str(tmp_path))
    assert main(RUN + ["--emergency-stop-file", path]) == 2
    line = one_error_line(capsys)
    assert f"field '--emergency-stop-file': invalid value '{path}'; allowed: a file path in an existing folder" \
        in line, line
    assert f"({why})" in line, line


def test_an_emergency_stop_file_in_a_folder_the_controller_cannot_look_in_exits_2(tmp_path, capsys, monkeypatch):
    """Path.exists() raised PermissionError on every cycle there. Root looks into any folder, so under root the
    refusal of stat() (EACCES) is played by Path itself."""
    locked = tmp_path / "locked"
    locked.mkdir()
    if os.geteuid() == 0:
        real = Path.stat

        def stat(self, *args, **kwargs):
            if self.parent == locked:
                raise PermissionError(errno.EACCES, "Permission denied", str(self))
            return real(self, *args, **kwargs)

        monkeypatch.setattr(Path, "stat", stat)
    locked.chmod(0o600)
    try:
        assert main(RUN + ["--emergency-stop-file", str(locked / "STOP")]) == 2
    finally:
        locked.chmod(0o700)
    assert "(Permission denied)" in one_error_line(capsys)


@pytest.mark.parametrize("exists", [False, True], ids=["not yet created", "already there"])
def test_an_emergency_stop_file_in_an_existing_folder_is_watched(tmp_path, exists):
    stop = tmp_path / "STOP"
    if exists:
        stop.write_text("")
    rec = run_cmd.build_reconciler(parse(["--emergency-stop-file", str(stop)]), metrics())
    assert rec.guard.emergency_stopped() is exists
    stop.touch()
    assert rec.guard.emergency_stopped() is True


BACKTEST = ["forecast", "backtest", "--trace", "{tmp}/trace.csv", "--models", "persistence"]


@pytest.mark.parametrize("argv, flag, value", [
    (["--horizons", "-1h"], "--horizons", "-1h"),
    (["--horizons", "-1h,4h"], "--horizons", "-1h"),
    (["--horizons", "-0.5h"], "--horizons", "-0.5h"),
    (["--step", "-5min"], "--step", "-5min"),
], ids=["one negative horizon", "a negative horizon first", "a negative fraction", "a negative step"])
def test_a_negative_duration_in_backtest_is_refused_naming_its_flag(tmp_path, capsys, argv, flag, value):
    (tmp_path / "trace.csv").write_text("timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(50)))
    assert main([a.replace("{tmp}", str(tmp_path)) for a in BACKTEST] + argv) == 2
    line = one_error_line(capsys)
    assert f"field '{flag}': invalid value '{value}'; allowed: a duration of at least 1s" in line, line


def negative_values_parser() -> NegativeValues:
    p = NegativeValues(prog="t")
    p.add_argument("--horizons")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("rest", nargs="*")
    return p


@pytest.mark.parametrize("argv, horizons, rest", [
    (["--horizons", "-1h"], "-1h", []),
    (["--horizons", "1h", "-2"], "1h", ["-2"]),         # only the word right after the flag is its value
    (["--horizons=-1h"], "-1h", []),
    (["--", "--horizons", "-1h"], None, ["--horizons", "-1h"]),   # after --, nothing is an option
], ids=["joined", "one value only", "already joined", "after --"])
def test_a_negative_word_after_a_flag_taking_one_value_is_its_value(argv, horizons, rest):
    args = negative_values_parser().parse_args(argv)
    assert (args.horizons, args.rest) == (horizons, rest)


def test_a_flag_taking_no_value_does_not_swallow_a_negative_word():
    with pytest.raises(SystemExit):   # argparse: -1h is an unknown option, as before
        negative_values_parser().parse_args(["--verbose", "-1h"])



@pytest.mark.parametrize("argv, flag, value", [
    (["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--interval", "-30s"], "--interval", "-30s"),
    (["run", "--prometheus", "http://127.0.0.1:9", "--dry-run", "--stale-after", "-2m"], "--stale-after", "-2m"),
    (["schedule", "--once", "--interval", "-2s"], "--interval", "-2s"),
], ids=["run interval", "run stale-after", "schedule interval"])
def test_every_command_reads_a_negative_duration_as_the_value_its_check_refuses(capsys, argv, flag, value):
    # the top-level parser hands every command NegativeValues: before, `run --interval -30s` was argparse's
    # 'expected one argument' and the check naming what --interval allows never ran
    assert main(argv) == 2
    line = one_error_line(capsys)
    assert f"field '{flag}': invalid value '{value}'" in line, line
