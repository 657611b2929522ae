"""The least --step `forecast backtest` names for a trace too long at the step given passes both its limits: the
steps read against the day around each, and the origins (forecasts per model) at the --stride given (audit s37a9
item 3).

Before: the least named kept the steps-by-day pairs only: on a 21-day requests log at --step 1s it named 13s, and
--step 13s was then refused for its 139,568 origins, and 37s next for --horizons 1h. The reruns end at the last
check, --min-train-days: no backtest runs.
"""

from __future__ import annotations

import re

import pytest

from balancer.cli import main

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--horizons", "1h", "--format", "requests"]


def _error(capsys, code: int) -> str:
    err = capsys.readouterr().err
    assert code == 2, err
    assert len(err.strip().splitlines()) == 1, err
    return err.strip()


@pytest.mark.parametrize("stride", ["1", "4"])
def test_the_least_step_named_passes_both_limits(tmp_path, capsys, stride):
    log = tmp_path / "requests.csv"
    log.write_text("timestamp\n" + "".join(f"{20 * i}\n" for i in range(21 * 86400 // 20)))
    run = [*BACKTEST, "--trace", str(log), "--stride", stride]
    line = _error(capsys, main([*run, "--step", "1s"]))
    least = re.search(r"a --step of at least (\d+)s over this trace's span", line)
    assert least, line
    assert f"at --stride {stride}" in line, line
    assert 3600 % int(least.group(1)) == 0, line   # a step --horizons 1h takes (37s was refused for it next)
    again = _error(capsys, main([*run, "--step", f"{least.group(1)}s", "--min-train-days", "1000"]))
    # refused at the last check, --min-train-days: past the --step, --stride and --horizons ones
    assert "field '--min-train-days'" in again, again
