"""`--json -` writes the JSON to standard output, as Unix tools read '-', and the human table to standard error.

Before, place, forecast backtest and calibrate wrote a file named '-' in the working folder and printed the table
on standard output, so `gputide place ... --json - | jq` read a markdown table. `calibrate --write-services -`
(a whole ServiceProfiles file, not JSON) is refused with exit 2 instead of making a file named '-'.
"""

from __future__ import annotations

import json

import pytest

from balancer.cli import main

NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,262144,8,V100M16\nn1,64000,262144,2,T4\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1000,1000,1,500\np1,1000,1000,2,1000\np2,1000,1000,0,0\n"
TRACE = "timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(300))
SERVICES = "services:\n  - name: chat\n    rpsPerReplica: 10\n    latencySloSeconds: 0.5\n"


def _calibration_samples() -> str:
    """Two replicas whose p99 stays at 0.1 s up to 10 req/s each and rises by 0.1 s per req/s beyond."""
    rows = []
    for i in range(600):
        load = 1 + (i % 120) / 120 * 20
        rows.append(f"{1_700_000_000 + 60 * i},{2 * load:.3f},2,{0.1 + max(load - 10, 0) * 0.1:.3f}")
    return "timestamp,demand_rps,replicas,p99_s\n" + "\n".join(rows) + "\n"


FILES = {"nodes.csv": NODES, "pods.csv": PODS, "trace.csv": TRACE, "calib.csv": _calibration_samples(),
         "services.yaml": SERVICES}
COMMANDS = [
    pytest.param(["place", "--nodes", "nodes.csv", "--pods", "pods.csv", "--policy", "bestfit", "--seeds", "2"],
                 {"unallocated_gpu_pct_at_100", "median_unallocated_gpu_pct", "seeds"}, "| arrived % |", id="place"),
    pytest.param(["forecast", "backtest", "--trace", "trace.csv", "--models", "persistence", "--horizons", "1h",
                  "--min-train-days", "0.1"], {"trace", "details", "scores"}, "persistence", id="forecast backtest"),
    pytest.param(["calibrate", "--csv", "calib.csv", "--service", "chat", "--slo", "0.5"], {"margin", "services"},
                 "| service |", id="calibrate"),
]


@pytest.mark.parametrize(("argv", "keys", "table"), COMMANDS)
def test_json_dash_is_standard_output_and_the_table_goes_to_standard_error(tmp_path, monkeypatch, capsys, argv,
                                                                             keys, table):
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    assert main([*argv, "--json", "-"]) == 0
    out, err = capsys.readouterr()
    doc = json.loads(out)   # all of standard output: nothing else printed there
    assert keys <= set(doc), sorted(doc)
    assert table in err and "Traceback" not in err
    assert not (tmp_path / "-").exists()


@pytest.mark.parametrize(("argv", "keys", "table"), COMMANDS)
def test_json_to_a_file_leaves_the_table_on_standard_output(tmp_path, monkeypatch, capsys, argv, keys, table):
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    assert main([*argv, "--json", "out.json"]) == 0
    out, err = capsys.readouterr()
    assert table in out and table not in err
    assert keys <= set(json.loads((tmp_path / "out.json").read_text()))


def test_write_services_dash_is_refused_naming_the_flag(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for name, text in FILES.items():
        (tmp_path / name).write_text(text)
    assert main(["calibrate", "--csv", "calib.csv", "--services", "services.yaml", "--write-services", "-"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gputide: error: field '--write-services': invalid value '-'; allowed: a file path"), err
    assert len(err.strip().splitlines()) == 1 and not (tmp_path / "-").exists()
