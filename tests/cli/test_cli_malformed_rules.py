"""`gputide prometheus --rules FILE` refuses a rule file Prometheus would not load: exit 2, one line naming the file,
the field, the value and what is allowed. Before, any YAML passed: `--config-only --out` wrote a config Prometheus
refused, and `--run` exited 1 with Prometheus' own log ('cannot unmarshal', 'Groupname must not be empty').
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from balancer.cli import main

CASES = [
    pytest.param("- record: x\n  expr: up\n", "(document)", "'list'", id="a list of rules, no groups"),
    pytest.param("rules: []\n", "rules", "[]", id="a key other than groups"),
    pytest.param("groups: {name: a}\n", "groups", "{'name': 'a'}", id="groups a mapping"),
    pytest.param("groups: [{rules: []}]\n", "groups[0].name", "None", id="a group without a name"),
    pytest.param("groups: [{name: a, rules: []}, {name: a, rules: []}]\n", "groups[1].name", "'a'",
                 id="a group name twice"),
    pytest.param("groups: [{name: a, rules: [{record: x, expr: up}], every: 1m}]\n", "groups[0].every", "'1m'",
                 id="an unknown group key"),
    pytest.param("groups: [{name: a, rules: 5}]\n", "groups[0].rules", "5", id="rules not a list"),
    pytest.param("groups: [{name: a, rules: [{expr: up}]}]\n", "groups[0].rules[0]", "{'expr': 'up'}",
                 id="a rule neither record nor alert"),
    pytest.param("groups: [{name: a, rules: [{record: x}]}]\n", "groups[0].rules[0].expr", "None",
                 id="a rule without expr"),
]


@pytest.mark.parametrize("text, field, value", CASES)
@pytest.mark.parametrize("out", [False, True], ids=["printed", "written"])
def test_a_rule_file_prometheus_refuses_exits_2(tmp_path, capsys, text, field, value, out):
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    argv = ["prometheus", "--config-only", "--targets", "a:1", "--rules", str(rules)]
    code = main(argv + (["--out", str(tmp_path / "prom")] if out else []))
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and "Traceback" not in captured.err, captured.err
    assert lines[0].startswith(f"gputide: error: {rules}: field '{field}': invalid value {value}; allowed: "), lines
    assert captured.out == "" and not (tmp_path / "prom").exists()


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool not installed")
@pytest.mark.parametrize("text, field, value", CASES)
def test_promtool_refuses_each_case_too(tmp_path, text, field, value):
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    result = subprocess.run(["promtool", "check", "rules", str(rules)], capture_output=True, text=True, timeout=60)
    assert "FAILED" in result.stdout + result.stderr


@pytest.mark.parametrize("text", ["", "groups: []\n", "groups: [{name: a}]\n",
                                  "groups: [{name: a, rules: [{alert: A, expr: up == 0, for: 1m}]}]\n"])
def test_rule_files_prometheus_loads_still_pass(tmp_path, capsys, text):
    rules = tmp_path / "rules.yaml"
    rules.write_text(text)
    assert main(["prometheus", "--config-only", "--targets", "a:1", "--rules", str(rules)]) == 0, \
        capsys.readouterr().err
