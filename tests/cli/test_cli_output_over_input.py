"""An output path naming one of the run's input files exits 2 at the start, the input untouched.

Before: `forecast backtest --trace t.csv --json t.csv` (and place --json, calibrate --json / --write-services,
slo-rules --out) checked only that the output could be written, then wrote it over the input: exit 0, the trace
gone. The same file under another name (a hard or symbolic link) is refused too.
"""

from __future__ import annotations

import os

import pytest

from balancer.cli import main

FILES = {
    "nodes.csv": "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,2,T4\n",
    "pods.csv": "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,500\n",
    "trace.csv": "timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(300)),
    "calib.csv": "timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n60,1,1,0.2\n",
    "services.yaml": "services:\n  - name: chat\n    rpsPerReplica: 10\n    latencySloSeconds: 0.5\n",
}
PLACE = ["place", "--nodes", "{tmp}/nodes.csv", "--pods", "{tmp}/pods.csv", "--policy", "bestfit", "--seeds", "1"]
BACKTEST = ["forecast", "backtest", "--trace", "{tmp}/trace.csv", "--models", "persistence", "--horizons", "1h",
            "--min-train-days", "0.1"]
CALIBRATE = ["calibrate", "--csv", "{tmp}/calib.csv", "--service", "chat", "--slo", "0.5"]
CALIBRATE_SERVICES = ["calibrate", "--prometheus", "http://127.0.0.1:1", "--services", "{tmp}/services.yaml"]
SLO_RULES = ["slo-rules", "--services", "{tmp}/services.yaml"]


@pytest.mark.parametrize("argv, flag, victim, input_flag", [
    pytest.param(PLACE + ["--json"], "--json", "pods.csv", "--pods", id="place --json over --pods"),
    pytest.param(PLACE + ["--json"], "--json", "nodes.csv", "--nodes", id="place --json over --nodes"),
    pytest.param(BACKTEST + ["--json"], "--json", "trace.csv", "--trace", id="backtest --json over --trace"),
    pytest.param(CALIBRATE + ["--json"], "--json", "calib.csv", "--csv", id="calibrate --json over --csv"),
    pytest.param(CALIBRATE_SERVICES + ["--json"], "--json", "services.yaml", "--services",
                 id="calibrate --json over --services"),
    pytest.param(CALIBRATE_SERVICES + ["--write-services"], "--write-services", "services.yaml", "--services",
                 id="calibrate --write-services over --services"),
    pytest.param(SLO_RULES + ["--out"], "--out", "services.yaml", "--services", id="slo-rules --out over --services"),
])
@pytest.mark.parametrize("name", ["same path", "hard link", "symbolic link"])
def test_an_output_over_an_input_exits_2_and_the_input_is_kept(tmp_path, capsys, argv, flag, victim, input_flag,
                                                                 name):
    for file, text in FILES.items():
        (tmp_path / file).write_text(text)
    source = tmp_path / victim
    target = source
    if name != "same path":
        target = tmp_path / ("alias-" + victim)
        (os.link if name == "hard link" else os.symlink)(source, target)
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv] + [str(target)])
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0] == (f"gputide: error: field '{flag}': invalid value '{target}'; allowed: a file other than the "
                        f"run's inputs (it is the input {input_flag} {source}, which writing would overwrite)"), lines
    assert source.read_text() == FILES[victim]


def test_an_output_beside_the_input_is_still_written(tmp_path, capsys):
    for file, text in FILES.items():
        (tmp_path / file).write_text(text)
    out = tmp_path / "backtest.json"
    code = main([a.replace("{tmp}", str(tmp_path)) for a in BACKTEST] + ["--json", str(out)])
    assert code == 0, capsys.readouterr().err
    assert out.read_text().startswith("{") and (tmp_path / "trace.csv").read_text() == FILES["trace.csv"]
