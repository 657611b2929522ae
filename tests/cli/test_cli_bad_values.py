"""Command-line values argparse takes without a word but no command can use: each sub-command refuses them before
it starts, with exit code 2 and one line naming the flag, the value and what is allowed (balancer.cmd._args).

Before, `--seed -1` and `--end nan` were numpy and datetime tracebacks, `--speed nan` or `--duration -1` ran an
exporter that never advanced or never stopped, `--json` into a missing folder failed after the whole run, and
`--models ,` or `--stages ,` ran everything or nothing as if the flag were not there.
"""

from __future__ import annotations

import pytest

from balancer.cli import main

OK_FLEET = ("apiVersion: gputide/v1alpha1\nkind: FleetSpec\nspec:\n  nodeGroups:\n"
            "    - {namePrefix: a-, count: 1, gpuModel: T4, gpusPerNode: 1}\n")
SERVICES = "apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices:\n  - {name: chat, rpsPerReplica: 3}\n"
TRACE = "timestamp,value\n" + "".join(f"{600 * i},{1 + i % 5}\n" for i in range(50))
CALIB = "timestamp,demand_rps,replicas,p99_s\n0,1,1,0.2\n60,1,1,0.2\n"
NODES = "sn,cpu_milli,memory_mib,gpu,model\nn0,64000,1024,0,\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np,1,1,1,500\n"
PROM = "http://127.0.0.1:1"   # nothing answers there: every case must fail before a query
SIM = ["simulate", "--scenario", "hotspot", "--policy", "none", "--days", "0.01", "--no-plots"]
BACKTEST = ["forecast", "backtest", "--trace", "{tmp}/trace.csv", "--models", "persistence"]
PLACE = ["place", "--nodes", "{tmp}/nodes.csv", "--pods", "{tmp}/pods.csv", "--policy", "bestfit"]
CAL = ["calibrate", "--prometheus", PROM, "--service", "chat"]
RENDER = ["dashboards", "render", "--prometheus", PROM, "--out", "{tmp}/png"]

CASES = [
    pytest.param(SIM + ["--out", "{tmp}/o", "--seed=-1"], "--seed", id="simulate: a negative seed"),
    pytest.param(SIM + ["--out", "{tmp}/trace.csv"], "--out", id="simulate: --out a file"),
    pytest.param(SIM + ["--out", "{tmp}/o", "--format", "requests"], "--format", id="simulate: --format, no trace"),
    pytest.param(BACKTEST[:-2] + ["--models", ","], "--models", id="backtest: --models with no model"),
    pytest.param(BACKTEST + ["--min-train-days", "inf"], "--min-train-days", id="backtest: infinite training"),
    pytest.param(BACKTEST + ["--min-train-days", "nan"], "--min-train-days", id="backtest: NaN training"),
    pytest.param(BACKTEST + ["--min-train-days=-1"], "--min-train-days", id="backtest: negative training"),
    pytest.param(BACKTEST + ["--origin", "2024-01-01"], "--origin", id="backtest: --origin of a CSV trace"),
    pytest.param(BACKTEST + ["--json", "{tmp}/no/such/out.json"], "--json", id="backtest: --json nowhere"),
    pytest.param(PLACE + ["--seeds", "99999999999"], "--seeds", id="place: seeds past memory"),
    pytest.param(PLACE + ["--json", "{tmp}"], "--json", id="place: --json a folder"),
    pytest.param(PLACE, "gpu", id="place: a node list without a GPU"),
    pytest.param(["calibrate", "--csv", "{tmp}/calib.csv", "--slo", "inf"], "--slo", id="calibrate: infinite SLO"),
    pytest.param(["calibrate", "--csv", "{tmp}/calib.csv", "--settle", "inf"], "--settle",
                 id="calibrate: infinite settle"),
    pytest.param(["calibrate", "--csv", "{tmp}/calib.csv", "--json", "{tmp}"], "--json",
                 id="calibrate: --json a folder"),
    pytest.param(CAL + ["--end", "nan"], "--end", id="calibrate: NaN end"),
    pytest.param(CAL + ["--end", "inf"], "--end", id="calibrate: infinite end"),
    pytest.param(CAL + ["--end", "1e300"], "--end", id="calibrate: end past 2100"),
    pytest.param(CAL + ["--end=-1"], "--end", id="calibrate: end before 1970"),
    pytest.param(CAL + ["--range", "inf"], "--range", id="calibrate: infinite range"),
    pytest.param(["calibrate", "--prometheus", "not a url", "--service", "chat"], "--prometheus",
                 id="calibrate: not a URL"),
    pytest.param(["calibrate", "--prometheus", PROM, "--service", 'chat"} or vector(1) #'], "--service",
                 id="calibrate: a service that rewrites the query"),
    pytest.param(["exporter", "--port", "0", "--seed=-1"], "--seed", id="exporter: a negative seed"),
    pytest.param(["exporter", "--port", "0", "--speed", "nan"], "--speed", id="exporter: NaN speed"),
    pytest.param(["exporter", "--port", "0", "--duration=-1"], "--duration", id="exporter: negative duration"),
    pytest.param(["exporter", "--port", "0", "--duration", "nan"], "--duration", id="exporter: NaN duration"),
    pytest.param(["exporter", "--port", "0", "--caps-interval", "0"], "--caps-interval",
                 id="exporter: caps read in a busy loop"),
    pytest.param(["exporter", "--backend", "nvml", "--fleet", "{tmp}/fleet.yaml"], "--fleet",
                 id="exporter: a fleet NVML ignores"),
    pytest.param(["prometheus", "--config-only", "--targets", "a:1", "--rules", "{tmp}/junk.yaml"], "(file)",
                 id="prometheus: a rule file that is not UTF-8"),
    pytest.param(["prometheus", "--config-only", "--targets", "a:1", "--out", "{tmp}/trace.csv"], "--out",
                 id="prometheus: --out a file"),
    pytest.param(["prometheus", "--run", "--targets", "a:1", "--port=-1"], "--port", id="prometheus: port -1"),
    pytest.param(["prometheus", "--config-only", "--targets", "a:1", "--cluster", 'eu"1'], "--cluster",
                 id="prometheus: a cluster no controller can select"),
    pytest.param(RENDER + ["--end", "nan"], "--end", id="dashboards: NaN end"),
    pytest.param(RENDER + ["--end", "inf"], "--end", id="dashboards: infinite end"),
    pytest.param(["soak", "--seed=-1", "--out", "{tmp}/soak"], "--seed", id="soak: a negative seed"),
    pytest.param(["soak", "--out", "{tmp}/trace.csv"], "--out", id="soak: --out a file"),
    pytest.param(["demo", "--stages", ",", "--out", "{tmp}/demo"], "--stages", id="demo: no stage"),
    pytest.param(["slo-rules", "--services", "{tmp}/services.yaml", "--buckets", ""], "--buckets",
                 id="slo-rules: empty buckets"),
    pytest.param(["slo-rules", "--services", "{tmp}/services.yaml", "--prometheus-rule", "--namespace", "Bad NS"],
                 "--namespace", id="slo-rules: a namespace no cluster can have"),
    pytest.param(["slo-rules", "--services", "{tmp}/services.yaml", "--namespace", "x"], "--namespace",
                 id="slo-rules: --namespace without a manifest"),
    pytest.param(["power-cap-agent", "--node", "n", "--interval", "inf"], "--interval",
                 id="power-cap-agent: never reads"),
]


@pytest.mark.parametrize("argv, field", CASES)
def test_unusable_values_exit_2_naming_the_flag(tmp_path, capsys, argv, field):
    for name, text in {"fleet.yaml": OK_FLEET, "services.yaml": SERVICES, "trace.csv": TRACE, "calib.csv": CALIB,
                       "nodes.csv": NODES, "pods.csv": PODS}.items():
        (tmp_path / name).write_text(text)
    (tmp_path / "junk.yaml").write_bytes(bytes(range(256)))
    code = main([a.replace("{tmp}", str(tmp_path)) for a in argv])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("gputide: error: "), err
    assert f"field '{field}'" in lines[0] and "allowed: " in lines[0], err


@pytest.mark.parametrize("content, field", [
    pytest.param(b"{not json", "(file)", id="not JSON"),
    pytest.param(b"\xff\xfe{}", "(file)", id="not UTF-8"),
    pytest.param(b"[1, 2]", "(document)", id="a list, not a dashboard"),
])
def test_a_dashboards_dir_holding_a_bad_file_exits_2_naming_it(tmp_path, capsys, content, field):
    (tmp_path / "board.json").write_bytes(content)
    code = main(["dashboards", "render", "--prometheus", PROM, "--out", str(tmp_path / "png"), "--dashboards-dir",
                 str(tmp_path)])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith(f"gputide: error: {tmp_path / 'board.json'}: field '{field}'"), err
