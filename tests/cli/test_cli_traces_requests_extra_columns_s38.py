"""`--format requests` on a demand trace with more columns than `timestamp,value` exits 2, as a bare one does; a
per-request log with extra columns is still counted (audit s38).

Before: only a file of exactly `timestamp,value` was refused. `timestamp,value,extra` (or a label column beside the
value, as a Prometheus export has), its times evenly spaced and each once, was read as one request a row and `value`
ignored: exit 0, a trace of 100 req/s backtested as 1/60 req/s. Then (audit of b7f7d048): several series exported
together, each time once per series, still went through as a log (its times repeated); a load generator's log at
5 req/s, 200 ms apart, was refused and sent to --format csv, which refuses a step under 1 s. Then (audit a10
of 58985940): that let a bare `timestamp,value` every 500 ms through too, counted as 2 req/s. Now (audit a20) one rule:
a numeric `value`, the same number of rows at each time, the times evenly spaced, at any spacing, is refused; the
200 ms load generator with a numeric `value`, an exact-rate synthetic log, is refused with it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from balancer.cli import main
from balancer.forecast.traces import load_demand

START = 1704067200   # 2024-01-01T00:00:00Z


def _run(tmp_path, capsys, trace, command):
    code = main([a.replace("{tmp}", str(tmp_path)) for a in command] + ["--trace", str(trace), "--format", "requests"])
    return code, capsys.readouterr()


def _refused(tmp_path, capsys, trace, command, rows):
    """The error line of a run refusing `trace` (exit 2) for its `value` column of `rows` numbers."""
    code, out = _run(tmp_path, capsys, trace, command)
    assert code == 2, out.err
    line = out.err.strip().splitlines()[-1]
    assert line.startswith(f"gputide: error: {trace}: field 'value': invalid value 'a column of {rows} numbers'; "
                           "allowed: a requests log: one row per request, no 'value' column"), line
    return line


BACKTEST = ["forecast", "backtest", "--models", "persistence", "--step", "1h", "--horizons", "1h",
            "--min-train-days", "1"]
SIMULATE = ["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.01", "--no-plots",
            "--out", "{tmp}/o"]


@pytest.mark.parametrize("header, row", [
    pytest.param("timestamp,value,extra", lambda i, t: f"{t:.3f},{100 + i % 7},{i % 3}", id="a numeric column"),
    pytest.param("timestamp,value,instance", lambda i, t: f"{t:.3f},{100 + i % 7},gpu-node-1:9400",
                 id="a label column"),
    pytest.param("Instance,Value,Timestamp", lambda i, t: f"gpu-node-1:9400,{100 + i % 7},{t:.3f}",
                 id="columns in another order and case"),
])
@pytest.mark.parametrize("command", [pytest.param(BACKTEST, id="forecast backtest"),
                                     pytest.param(SIMULATE, id="simulate")])
def test_a_demand_trace_with_extra_columns_given_as_requests_exits_2(tmp_path, capsys, command, header, row):
    rng = np.random.default_rng(3)
    times = START + 60 * np.arange(3000) + rng.uniform(-5, 5, 3000)   # a scrape each minute, a little jittered
    trace = tmp_path / "t.csv"
    trace.write_text(header + "\n" + "".join(row(i, t) + "\n" for i, t in enumerate(times)))
    line = _refused(tmp_path, capsys, trace, command, 3000)
    assert "demand trace: --format csv" in line and "rename or drop `value`" in line, line


@pytest.mark.parametrize("header, row", [
    pytest.param("timestamp,model,input_tokens,output_tokens",
                 lambda rng, s: f"{s},llama-3-8b,{rng.integers(10, 4000)},{rng.integers(1, 800)}", id="no value"),
    pytest.param("timestamp,model,value,status",
                 lambda rng, s: f"{s},llama-3-8b,{rng.integers(10, 4000)},200", id="value the tokens"),
])
def test_a_per_request_log_with_extra_columns_is_still_counted(tmp_path, capsys, header, row):
    """Poisson arrivals, about one request every 30 s over 3 days, each time once (stamped in µs)."""
    rng = np.random.default_rng(9)
    times = pd.Timestamp(START, unit="s", tz="UTC") + pd.to_timedelta(np.cumsum(rng.exponential(30.0, 8640)),
                                                                      unit="s")
    log = tmp_path / "r.csv"
    log.write_text(header + "\n" + "".join(row(rng, t.isoformat(timespec="microseconds")) + "\n" for t in times))
    code, out = _run(tmp_path, capsys, log, BACKTEST + ["--json", str(tmp_path / "b.json")])
    assert code == 0, out.err
    assert "persistence" in out.out, out.out


def _series_export(header, row, times, instances):
    return header + "\n" + "".join(row(i, t, inst) + "\n" for i, t in enumerate(times) for inst in instances)


@pytest.mark.parametrize("text, k", [
    pytest.param(lambda times: _series_export("timestamp,value,instance", lambda i, t, inst: f"{t:.0f},{100 + i % 7},"
                                              f"{inst}", times, ("a:9400", "b:9400")), 2, id="two instances"),
    pytest.param(lambda times: _series_export("Job,Timestamp,Instance,Value", lambda i, t, inst: f"dcgm,{t:.3f},{inst},"
                                              f"{50 + i % 5}", times, ("a:9400", "b:9400", "c:9400")), 3,
                 id="three instances, two label columns"),
])
@pytest.mark.parametrize("command", [pytest.param(BACKTEST, id="forecast backtest"),
                                     pytest.param(SIMULATE, id="simulate")])
def test_several_series_exported_together_given_as_requests_exit_2(tmp_path, capsys, command, text, k):
    """A Prometheus export of k series (`timestamp,value,instance`, a scrape every 60 s): each time k times, once for
    each label set. Before: its repeated times let it through as a requests log, k rows a minute (0.033 req/s for
    two instances, exit 0)."""
    times = START + 60 * np.arange(3000)
    trace = tmp_path / "t.csv"
    trace.write_text(text(times))
    line = _refused(tmp_path, capsys, trace, command, 3000 * k)
    assert "export one series, such as sum(...) of them, and read it with --format csv" in line, line
    assert f"each of its 3000 times given {k} times: {k} series" in line, line
    assert "rename or drop `value`" in line, line


def test_a_load_generator_log_every_200_ms_with_a_numeric_value_exits_2(tmp_path, capsys):
    """An exact-rate synthetic log: a load generator at exactly 5 req/s, a request every 200 ms for an hour, each
    logged with its tokens as `value`, each time once and evenly spaced as a demand trace's are. Counted before
    (58985940: a column besides timestamp and value made rows under 1 s apart arrivals); refused now by the one rule,
    at any spacing (audit a20). Real logs' arrival times vary and are counted; this one is read once `value` is
    renamed, as the error says."""
    log = tmp_path / "r.csv"
    log.write_text("timestamp,model,value\n" + "".join(f"{START + 0.2 * i:.3f},llama-3-8b,{100 + i % 50}\n"
                                                       for i in range(5 * 3600)))
    line = _refused(tmp_path, capsys, log, SIMULATE, 5 * 3600)
    assert "rename or drop `value`" in line, line
    log.write_text(log.read_text().replace("timestamp,model,value", "timestamp,model,tokens", 1))
    code, out = _run(tmp_path, capsys, log, SIMULATE)
    assert code == 0, out.err
    assert (tmp_path / "o" / "summary.json").is_file()


@pytest.mark.parametrize("command", [pytest.param(BACKTEST, id="forecast backtest"),
                                     pytest.param(SIMULATE, id="simulate")])
def test_a_bare_demand_trace_finer_than_a_second_given_as_requests_exits_2(tmp_path, capsys, command):
    """`timestamp,value` every 500 ms: a demand trace, which `--format csv --step 1min` reads. It was counted as
    2 req/s (exit 0; audit a10 of 58985940), refused before; the rule holds at any spacing."""
    trace = tmp_path / "t.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{START + 0.5 * i:.3f},{5000 + i % 7}\n" for i in range(7200)))
    line = _refused(tmp_path, capsys, trace, command, 7200)
    assert "demand trace: --format csv" in line, line
    assert load_demand(trace, "csv", step="1min").dropna().between(5000, 5006).all()
