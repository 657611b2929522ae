"""A comma-separated flag names each value once, and a range too long to read is blamed on --range (audit s32x5,
item 6): `demo --stages live,live` ran the stage twice, `forecast backtest --horizons 1h,1h` or `--models a,a`
scored one thing twice, and `calibrate --range 1e308` was refused as a bad --step. Each is now exit 2, one line
naming the flag, the value and what is allowed."""

from __future__ import annotations

import pytest

from balancer.cli import main
from tests.cli.test_cli_run_inputs import one_error_line

TRACE = "timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(50))
BACKTEST = ["forecast", "backtest", "--trace", "{tmp}/trace.csv"]


@pytest.mark.parametrize("argv, flag, value", [
    (["demo", "--stages", "live,live", "--out", "{tmp}/trace.csv"], "--stages", "live"),   # --out: old code stops
    ([*BACKTEST, "--models", "persistence,persistence"], "--models", "persistence"),
    ([*BACKTEST, "--models", "persistence", "--horizons", "1h,1h"], "--horizons", "1h"),
    ([*BACKTEST, "--models", "persistence", "--horizons", "1h,60m"], "--horizons", "60m"),
    (["calibrate", "--prometheus", "http://127.0.0.1:1", "--service", "chat", "--range", "1e308"], "--range",
     "1e308"),
    (["calibrate", "--prometheus", "http://127.0.0.1:1", "--service", "chat", "--service", "chat"], "--service",
     "chat"),
    (["calibrate", "--csv", "{tmp}/trace.csv", "--service", "chat", "--service", "chat"], "--service", "chat"),
], ids=["demo stages", "backtest models", "backtest horizons", "backtest horizons in two spellings",
        "calibrate range", "calibrate --service repeated", "calibrate --csv and --service repeated"])
def test_a_repeated_or_unreadable_value_exits_2_naming_it(tmp_path, capsys, argv, flag, value):
    (tmp_path / "trace.csv").write_text(TRACE)
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 2
    line = one_error_line(capsys)
    assert line.startswith(f"gputide: error: field '{flag}': invalid value '{value}'") and "allowed: " in line, line


def test_a_repeated_service_is_named_as_repeated(capsys):
    """With --csv, `--service chat --service chat` was refused as 'one name: a CSV holds one service', not as the
    same name given twice; from Prometheus it queried chat twice (review of s32)."""
    assert main(["calibrate", "--prometheus", "http://127.0.0.1:1", "--service", "chat", "--service", "chat"]) == 2
    line = one_error_line(capsys)
    assert "allowed: service names (one --service each), each once (chat is given twice)" in line, line
