"""The CLI on bad input files: exit code 2, one line on stderr naming the file and the field, no traceback.

A sample of the bad inputs the property tests generate, each run through a real `python -m balancer.cli`
subprocess (all cases start together, so the table costs about one interpreter start-up).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

POLICY_NAN = "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nspec:\n  hotspots: {marginC: .nan}\n"
POLICY_KEYS = "apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nspec:\n  1: x\n  hotspotz: {}\n"
FLEET_META = ("apiVersion: gputide/v1alpha1\nkind: FleetSpec\nmetadata: [x]\nspec:\n  nodeGroups:\n"
              "    - {namePrefix: a-, count: 1, gpuModel: T4, gpusPerNode: 1}\n")
NODES_INF = "sn,cpu_milli,memory_mib,gpu,model\nn1,inf,1024,1,G2\n"
PODS = "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np1,100,100,1,500\n"
POLICY_TWICE = ("apiVersion: gputide/v1alpha1\nkind: BalancerPolicy\nspec:\n  safety: {maxActionsPerCycle: 5}\n"
                "  safety: {cooldownS: 5}\n")
NODES_RAGGED = "sn\n" + "a\n" * 2 + "a,b\n"   # a row longer than the header: named by its row (traces.read_rows)
NODES_QUOTE = "sn,cpu_milli\n" + "a,1\n" * 2 + '"b,1\n'   # pandas' message (EOF inside string) ends in a newline
TRACE_NEG = "timestamp,value\n0,1\n600,-4\n1200,3\n"

CASES = {
    "policy file with a NaN margin": (["simulate", "--scenario", "hotspot", "--policy", "gputide", "--days", "0.01",
                                       "--policy-file", "{bad}", "--out", "{tmp}/out"], POLICY_NAN,
                                      "spec.hotspots.marginC"),
    "policy file with int and str unknown sections": (["simulate", "--scenario", "hotspot", "--policy", "gputide",
                                                       "--policy-file", "{bad}", "--out", "{tmp}/out"],
                                                      POLICY_KEYS, "spec.1"),
    "policy file that is not UTF-8": (["simulate", "--scenario", "hotspot", "--policy", "gputide",
                                       "--policy-file", "{bad}", "--out", "{tmp}/out"], b"\xff\xfe\x00\x81", "(file)"),
    "fleet spec whose metadata is a list": (["simulate", "--scenario", "hotspot", "--policy", "none", "--cluster",
                                             "{bad}", "--out", "{tmp}/out"], FLEET_META, "metadata"),
    "node list with infinite CPU": (["place", "--nodes", "{bad}", "--pods", "{tmp}/pods.csv", "--policy", "fgd",
                                     "--seeds", "1"], NODES_INF, "cpu_milli"),
    "node list that is a directory": (["place", "--nodes", "{tmp}", "--pods", "{tmp}/pods.csv", "--policy", "fgd",
                                       "--seeds", "1"], "", "path"),
    "demand trace with negative demand": (["forecast", "backtest", "--trace", "{bad}"], TRACE_NEG, "value"),
    "policy file with a section written twice": (["check", "{bad}"], POLICY_TWICE, "safety"),
    "policy file nested past Python's stack": (["check", "{bad}"], "[" * 5000 + "]" * 5000, "(document)"),
    "node list with a row too long": (["place", "--nodes", "{bad}", "--pods", "{tmp}/pods.csv", "--policy",
                                       "fgd", "--seeds", "1"], NODES_RAGGED, "row 4"),
    "node list the pandas parser chokes on": (["place", "--nodes", "{bad}", "--pods", "{tmp}/pods.csv", "--policy",
                                               "fgd", "--seeds", "1"], NODES_QUOTE, "format"),
}


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, tuple[int, str, str, str]]:
    procs = {}
    for name, (argv, content, _) in CASES.items():
        tmp = tmp_path_factory.mktemp("cli")
        bad = tmp / "bad.input"
        bad.write_bytes(content if isinstance(content, bytes) else content.encode())
        (tmp / "pods.csv").write_text(PODS)
        args = [a.format(bad=bad, tmp=tmp) for a in argv]
        procs[name] = (subprocess.Popen([sys.executable, "-m", "balancer.cli", *args], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, text=True, cwd=Path(__file__).parents[2]), str(bad))
    out = {}
    for name, (proc, bad) in procs.items():
        stdout, stderr = proc.communicate(timeout=120)
        out[name] = (proc.returncode, stdout, stderr, bad)
    return out


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_exits_2_with_one_line_naming_the_field(outcomes, case):
    code, _stdout, stderr, bad = outcomes[case]
    field = CASES[case][2]
    assert "Traceback" not in stderr
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, stderr
    assert code == 2
    assert lines[0].startswith("gputide: error: ")
    assert f"field '{field}'" in lines[0] and "allowed:" in lines[0]
    if field not in ("path",):
        assert bad in lines[0]
