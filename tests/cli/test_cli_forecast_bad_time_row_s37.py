"""Each command reading a time column names the row of its bad timestamp, exit 2.

Before: a column of epoch seconds with `abc` on row 51 was refused naming `0` on row 2, a valid time, in
`calibrate --csv`, `forecast backtest --trace` and `simulate --trace` alike.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

ALLOWED = "ISO-8601 (e.g. 2024-01-01T00:00:00Z) or epoch seconds"


def _rows(bad: str, tail: str) -> str:
    return "".join(f"{bad if i == 49 else 600 * i},{1 + i % 5}{tail}\n" for i in range(300))


@pytest.mark.parametrize("command, header, tail", [
    pytest.param(["forecast", "backtest", "--models", "persistence", "--horizons", "1h", "--trace"],
                 "timestamp,value", "", id="forecast backtest"),
    pytest.param(["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.01", "--no-plots",
                  "--out", "{tmp}/o", "--trace"], "timestamp,value", "", id="simulate"),
    pytest.param(["calibrate", "--service", "chat", "--slo", "0.5", "--csv"],
                 "timestamp,demand_rps,replicas,p99_s", ",1,0.2", id="calibrate"),
])
@pytest.mark.parametrize("bad", ["abc", "12:00"])
def test_a_bad_epoch_time_is_named_on_its_row(tmp_path, capsys, command, header, tail, bad):
    trace = tmp_path / "t.csv"
    trace.write_text(f"{header}\n{_rows(bad, tail)}")
    code = main([a.replace("{tmp}", str(tmp_path)) for a in command] + [str(trace)])
    err = capsys.readouterr().err
    assert code == 2, err
    assert err.strip() == (f"gputide: error: {trace}: field 'timestamp': invalid value '{bad}'; allowed: {ALLOWED} "
                           "(row 51)"), err
