"""`gputide slo-rules`: it writes the rule file to --out or stdout and says per service which bucket it judges by;
every bad input exits 2 with one line naming the file, the field, the value and what is allowed."""

from __future__ import annotations

import pytest
import yaml

from balancer.cli import main

PROFILE = "apiVersion: gputide/v1alpha1\nkind: ServiceProfiles\nservices:\n  - {name: %s, rpsPerReplica: 10%s}\n"


def run(capsys, tmp_path, name: str = "chat", extra: str = "", *flags: str) -> tuple[int, str, str]:
    services = tmp_path / "services.yaml"
    services.write_text(PROFILE % (name, extra))
    rc = main(["slo-rules", "--services", str(services), *flags])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_the_rules_go_to_out_and_each_service_s_bucket_to_stderr(capsys, tmp_path):
    out_file = tmp_path / "slo.yaml"
    rc, out, err = run(capsys, tmp_path, "chat", ", latencySloSeconds: 0.7", "--out", str(out_file))
    assert rc == 0 and out == ""
    doc = yaml.safe_load(out_file.read_text())
    assert [r["record"] for r in doc["groups"][0]["rules"]][:2] == ["service:vllm_requests:rate5m",
                                                                   "service:vllm_slo_violations:rate5m"]
    assert "chat: SLO 0.7 s is not a bucket boundary; requests over 0.5 s" in err


def test_without_out_the_rules_go_to_stdout_and_the_default_slo_is_half_a_second(capsys, tmp_path):
    rc, out, err = run(capsys, tmp_path)
    assert rc == 0 and yaml.safe_load(out)["groups"][0]["name"] == "gputide-slo-vllm"
    assert 'le=~"0[.]5"' in out and "chat: SLO 0.5 s, counted at the le=0.5 bucket" in err


@pytest.mark.parametrize(("name", "extra", "flags", "field", "value", "allowed"), [
    ("chat", ", latencySloSeconds: 0.2", [], "services[0].latencySloSeconds", "0.2", "at least 0.3 s"),
    ("chat", "", ["--buckets", "1,2.5,5"], "services[0].latencySloSeconds", "0.5", "at least 1 s"),
    ("Chat Bot", "", [], "services[0].name", "'Chat Bot'", "a Deployment's name"),
    ("team_a/chat", "", [], "services[0].name", "'team_a/chat'", "optionally after its namespace"),
    ("chat", ", latencySloSeconds: -1", [], "services[0].latencySloSeconds", "-1",
     "a number from 0.001 to 3600"),
    ("chat", "", ["--buckets", "0.5,0.3"], "--buckets", "'0.5,0.3'", "increasing bucket boundaries"),
    ("chat", "", ["--buckets", "0.3,fast"], "--buckets", "'0.3,fast'", "in seconds, > 0"),
    ("chat", "", ["--buckets", "0,0.3"], "--buckets", "'0,0.3'", "> 0"),
    ("chat", "", ["--objective", "0.999x"], "--objective", "'0.999x'", "between 0.5 and 1"),
    ("chat", "", ["--objective", "99"], "--objective", "'99'", "between 0.5 and 1"),
    ("chat", "", ["--objective", "1"], "--objective", "'1'", "between 0.5 and 1, both excluded"),
    ("chat", "", ["--objective", "0.5"], "--objective", "'0.5'", "between 0.5 and 1, both excluded"),
    ("chat", "", ["--objective", "nan"], "--objective", "'nan'", "e.g. 0.99 for a p99 latency target"),
], ids=["an SLO under vLLM's smallest bucket", "the default SLO under --buckets' smallest",
        "a name no Deployment can have", "a namespace no namespace can have", "a negative SLO (the loader's check)",
        "buckets out of order", "a bucket that is not a number", "a zero bucket", "an objective that is not a number",
        "an objective as a percentage", "an objective of 1: no budget at all", "an objective of a half",
        "a NaN objective"])
def test_bad_input_exits_2_naming_file_field_value_and_what_is_allowed(capsys, tmp_path, name, extra, flags, field,
                                                                       value, allowed):
    rc, out, err = run(capsys, tmp_path, name, extra, *flags)
    assert rc == 2 and out == ""
    assert f"field '{field}': invalid value {value}; allowed: " in err and allowed in err
    assert err.count("\n") == 1
    if not field.startswith("--"):
        assert str(tmp_path / "services.yaml") in err


def test_a_missing_profiles_file_exits_2_naming_it(capsys, tmp_path):
    rc = main(["slo-rules", "--services", str(tmp_path / "nope.yaml")])
    assert rc == 2 and str(tmp_path / "nope.yaml") in capsys.readouterr().err


def test_an_unwritable_out_exits_2_naming_it(capsys, tmp_path):
    rc, _, err = run(capsys, tmp_path, "chat", "", "--out", str(tmp_path / "no-such-dir" / "slo.yaml"))
    assert rc == 2 and "field '--out'" in err and "a writable file path" in err


def test_objective_sets_the_alerts_budget_and_the_default_is_a_p99_target(capsys, tmp_path):
    _, default, _ = run(capsys, tmp_path)
    rc, strict, _ = run(capsys, tmp_path, "chat", "", "--objective", "0.999")
    assert rc == 0
    alerts = {r["alert"]: r for g in yaml.safe_load(strict)["groups"] for r in g["rules"] if "alert" in r}
    assert "> (6 * 0.001)" in alerts["InferenceSloBurnRateSlow"]["expr"]
    assert "--objective 0.999: latencySloSeconds is a p99.9 target" in strict
    assert "--objective 0.99: latencySloSeconds is a p99 target" in default and "(6 * 0.01)" in default


def test_out_dash_is_standard_output_not_a_file_named_dash(capsys, tmp_path, monkeypatch):
    """`--out -` is `_args.STDOUT`, as every command's output flag reads it (a refactor: the literal '-' before)."""
    monkeypatch.chdir(tmp_path)
    rc, out, _ = run(capsys, tmp_path, "chat", "", "--out", "-")
    assert rc == 0 and yaml.safe_load(out)["groups"][0]["name"] == "gputide-slo-vllm"
    assert not (tmp_path / "-").exists()
