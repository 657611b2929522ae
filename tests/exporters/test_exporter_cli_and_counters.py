"""`gputide exporter` end to end, and the dcgm-exporter counters CSV against the metric contract and the rules."""

from __future__ import annotations

import csv
import os
import re
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from exporters.backends.sim import NOT_SIMULATED
from exporters.collector import GPU_FIELDS

ROOT = Path(__file__).resolve().parents[2]
CSV = ROOT / "exporters" / "dcgm-counters.csv"


def _counters() -> dict[str, str]:
    rows = {}
    with CSV.open() as fh:
        for row in csv.reader(line for line in fh if line.strip() and not line.startswith("#")):
            assert len(row) == 3, row
            name, typ, help_ = (c.strip() for c in row)
            assert typ in ("gauge", "counter") and help_, row
            rows[name] = typ
    return rows


def _contract_names() -> set[str]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    section = text.split("## 1.", 1)[1].split("## 2.", 1)[0]
    return set(re.findall(r"^\| `(DCGM_FI_[A-Z_]+)`", section, re.M))


def test_the_counters_csv_enables_exactly_the_contracts_dcgm_fields_with_the_right_types():
    rows = _counters()
    assert set(rows) == _contract_names()
    assert rows["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == "counter"
    assert {n: t for n, t, _ in GPU_FIELDS} == rows


def test_the_counters_csv_covers_every_dcgm_name_the_rules_use():
    rules = sorted((ROOT / "rules").glob("*.yaml"))
    if not rules:
        pytest.skip("no rules/*.yaml yet")
    used = set()
    for path in rules:
        used |= set(re.findall(r"\bDCGM_FI_[A-Z0-9_]+", path.read_text()))
    assert used, "rules use no DCGM series?"
    # the rules also read DCGM's name before 3.3 for the same field, which a CSV for a current DCGM cannot list
    assert "DCGM_FI_DEV_CLOCKS_EVENT_REASONS" in _counters()
    used -= {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS"}
    assert used <= set(_counters()), sorted(used - set(_counters()))


def _start(*args: str) -> tuple[subprocess.Popen, int]:
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen([sys.executable, "-m", "balancer.cli", "exporter", *args], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    m = re.search(r":(\d+)/metrics", line)
    if not m:
        proc.kill()
        raise AssertionError(f"no port in {line!r}: {proc.stderr.read()}")
    return proc, int(m.group(1))


def test_gputide_exporter_sim_serves_every_series_for_every_gpu_of_the_default_fleet():
    proc, port = _start("--backend", "sim", "--port", "0", "--listen", "127.0.0.1", "--duration", "60")
    try:
        body = ""
        for _ in range(50):
            try:
                body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
                break
            except OSError:
                time.sleep(0.1)
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        for name, _, _ in GPU_FIELDS:
            if name not in NOT_SIMULATED:
                assert len({s.labels["UUID"] for s in fams[name].samples}) == 256, name
        assert fams["gputide_gpu_workload_info"].samples
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.parametrize("args", [["--node", "no-such-node"], ["--fleet", "/nonexistent.yaml"], ["--port", "70000"]],
                         ids=["unknown node", "missing fleet file", "port out of range"])
def test_bad_exporter_input_exits_with_code_2_and_names_the_field(args, capsys):
    from balancer.cli import main

    assert main(["exporter", "--port", "0", "--duration", "0.1", *args]) == 2
    assert "field" in capsys.readouterr().err


@pytest.mark.parametrize(("flag", "env", "expected"), [("n7", "ignored", "n7"), ("", "node-from-env", "node-from-env"),
                                                       ("", None, None)])
def test_the_nvml_exporter_labels_series_with_the_node_name(flag, env, expected, monkeypatch):
    """In a pod the machine's hostname is the pod's name: the DaemonSet passes --hostname=$(NODE_NAME), and without
    the flag $NODE_NAME still wins over it (None: the backend falls back to the hostname)."""
    from balancer.cli import build_parser
    from balancer.cmd.exporter import build_backend
    from exporters.backends import nvml as nvml_mod

    seen = {}
    monkeypatch.setattr(nvml_mod, "NvmlBackend", lambda hostname=None: seen.setdefault("hostname", hostname))
    if env is None:
        monkeypatch.delenv("NODE_NAME", raising=False)
    else:
        monkeypatch.setenv("NODE_NAME", env)
    build_backend(build_parser().parse_args(["exporter", "--backend", "nvml", *(["--hostname", flag] if flag else [])]))
    assert seen["hostname"] == expected


def test_hostname_is_for_the_nvml_backend_only(capsys):
    from balancer.cli import main

    assert main(["exporter", "--backend", "sim", "--hostname", "n1", "--port", "0", "--duration", "0.1"]) == 2
    assert "--hostname" in capsys.readouterr().err
