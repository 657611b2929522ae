"""`--format requests` on a `timestamp,value` demand trace exits 2 naming the file, the column and `--format csv`.

Before: forecast backtest and simulate counted its rows as requests and ignored `value` (exit 0).
"""

from __future__ import annotations

import pytest

from balancer.cli import main


@pytest.mark.parametrize("command", [
    pytest.param(["forecast", "backtest", "--models", "persistence", "--step", "1h"], id="forecast backtest"),
    pytest.param(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.01", "--no-plots",
                  "--out", "{tmp}/o"], id="simulate"),
])
def test_a_demand_trace_given_as_requests_exits_2(tmp_path, capsys, command):
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{100 + i % 7}\n" for i in range(3000)))
    code = main([a.replace("{tmp}", str(tmp_path)) for a in command] + ["--trace", str(trace), "--format", "requests"])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip().startswith(f"gputide: error: {trace}: field 'value': invalid value 'a column of 3000 "
                                  "numbers'; allowed: a requests log"), err
    assert "--format csv" in err, err
