"""A `true`/`false` where a number belongs exits 2 naming the file, the row, the field and the value.

Before (audit a1): pandas reads a column of true/false as booleans and to_numeric took them for 1 and 0, so a
trace whose `value` column read true/false was a demand of 1 and 0 req/s, a ServeGen rate of `true` 1 req/s, and
a pod list with `num_gpu` true a pod asking for one GPU: each replayed or backtested with exit 0.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

BACKTEST = ["forecast", "backtest", "--models", "persistence", "--min-train-days", "0.1", "--horizons", "1h"]
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\n"


def _one_error(capsys, code: int) -> str:
    """The one line written to stderr, after exit 2."""
    err = capsys.readouterr().err
    assert code == 2 and "Traceback" not in err, err
    (line,) = (text for text in err.splitlines() if text.strip())
    return line


def test_a_trace_value_of_true_false_exits_2(tmp_path, capsys):
    trace = tmp_path / "trace.csv"
    trace.write_text("timestamp,value\n" + "".join(f"{600 * i},{'true' if i % 2 else 'false'}\n" for i in range(300)))
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(trace)]))
    assert line.startswith(f"gputide: error: {trace}: field 'value': invalid value False; allowed: a number "), line
    assert line.endswith("(row 2)"), line


@pytest.mark.parametrize("rows, field, row", [
    pytest.param("".join(f"{600 * i},true\n" for i in range(300)), "rate_req_per_s", 1, id="rate"),
    pytest.param("true,1\nfalse,2\n", "window_start_s", 1, id="start"),
])
def test_a_servegen_cell_of_true_exits_2(tmp_path, capsys, rows, field, row):
    folder = tmp_path / "sg"
    folder.mkdir()
    (folder / "c1.csv").write_text(rows)
    line = _one_error(capsys, main(BACKTEST + ["--trace", str(folder), "--format", "servegen"]))
    assert line.startswith(f"gputide: error: {folder / 'c1.csv'}: field '{field}': invalid value True; "), line
    assert line.endswith(f"(row {row})"), line


@pytest.mark.parametrize("pods, field", [
    pytest.param("p,1000,1024,True,500\nq,1000,1024,true,1000\n", "num_gpu", id="num_gpu"),
    pytest.param("p,TRUE,1024,1,500\nq,false,1024,1,1000\n", "cpu_milli", id="cpu_milli"),
])
def test_a_pod_count_of_true_exits_2(tmp_path, capsys, pods, field):
    (tmp_path / "nodes.csv").write_text(NODES)
    path = tmp_path / "pods.csv"
    path.write_text("name,cpu_milli,memory_mib,num_gpu,gpu_milli\n" + pods)
    out = tmp_path / "out.json"
    code = main(["place", "--nodes", str(tmp_path / "nodes.csv"), "--pods", str(path), "--policy", "bestfit",
                 "--seeds", "1", "--json", str(out)])
    line = _one_error(capsys, code)
    assert line.startswith(f"gputide: error: {path}: field '{field}': invalid value True; allowed: a number "), line
    assert line.endswith("not true/false (row 2)") and not out.exists(), line
