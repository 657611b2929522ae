"""The SLO rules `gputide slo-rules` writes from vLLM's histogram (balancer.telemetry.slo_rules): which bucket a
service's violations are counted above, the `le` spellings matched, that promtool accepts the output (as a rule
file and inside a PrometheusRule), and that the promtool tests' fixture is what the generator writes today."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from balancer.cli import main
from balancer.telemetry import slo_rules as sr

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "rules" / "tests" / "fixtures"
SOURCE = "rules/tests/fixtures/services.yaml"  # as the fixture's header names it
PROFILES = """apiVersion: gputide/v1alpha1
kind: ServiceProfiles
services:
  - {name: chat, rpsPerReplica: 10, latencySloSeconds: 1}
  - {name: search, rpsPerReplica: 10, latencySloSeconds: 1.2}
  - {name: team-a/summarize, rpsPerReplica: 5, latencySloSeconds: 2}
  - {name: summarize, rpsPerReplica: 5, latencySloSeconds: 30}
"""


def generate(capsys, *flags: str, services: str = SOURCE) -> tuple[int, str, str]:
    rc = main(["slo-rules", "--services", services, *flags])
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.parametrize(("slo", "le", "exact"), [
    (0.5, 0.5, True), (0.7, 0.5, False), (0.3, 0.3, True), (0.1 + 0.2, 0.3, True), (1, 1.0, True),
    (59.9, 50.0, False), (10_000, 7680.0, False),
], ids=["on a boundary", "between two boundaries: the lower one", "the smallest boundary",
        "a boundary up to binary rounding", "an integer SLO", "just under a boundary", "over the largest"])
def test_violations_are_counted_above_the_largest_bucket_at_or_under_the_slo(slo, le, exact):
    [chosen] = sr.choose_buckets([("chat", slo)], sr.VLLM_E2E_BUCKETS)
    assert (chosen.le, chosen.exact) == (le, exact)


@given(st.floats(min_value=0.3, max_value=1e5, allow_nan=False))
def test_the_chosen_bucket_is_never_above_the_slo_and_the_next_one_is(slo):
    [chosen] = sr.choose_buckets([("chat", slo)], sr.VLLM_E2E_BUCKETS)
    above = [b for b in sr.VLLM_E2E_BUCKETS if b > chosen.le]
    assert chosen.le <= slo * (1 + 1e-9) and (not above or above[0] > slo)


@pytest.mark.parametrize(("boundary", "matches", "misses"), [
    (0.5, ["0.5"], ["0x5", "0.55", "5"]),
    (2.0, ["2", "2.0"], ["20", "2x0", "2.05"]),
    (7680.0, ["7680", "7680.0"], ["768", "76800"]),
], ids=["a fraction", "an integer in both spellings", "a large integer"])
def test_the_le_matcher_takes_both_spellings_of_a_boundary_and_nothing_else(boundary, matches, misses):
    pattern = sr.le_matcher(boundary)
    assert "\\" not in pattern  # no escape PromQL's string would need doubled
    assert all(re.fullmatch(pattern, s) for s in matches)
    assert not any(re.fullmatch(pattern, s) for s in misses)


def test_a_bare_name_leaves_the_namespaces_a_qualified_profile_names_to_it():
    slos = sr.choose_buckets([("llm", 1.0), ("team-a/llm", 1.0), ("team-b/llm", 1.0), ("chat", 1.0)],
                             sr.VLLM_E2E_BUCKETS)
    exprs = {(r["record"], tuple(sorted(r.get("labels", {}).items()))): r["expr"]
             for r in sr.rule_groups(slos)[0]["rules"]}
    bare = exprs[("service:vllm_requests:rate5m", (("service", "llm"),))]
    qualified = exprs[("service:vllm_requests:rate5m", (("namespace", "team-a"), ("service", "llm")))]
    assert 'namespace!~"team-a|team-b"' in bare
    assert 'namespace="team-a", deployment="llm"' in qualified
    assert 'info{deployment="chat"}[5m]' in exprs[("service:vllm_requests:rate5m", (("service", "chat"),))]
    assert len(exprs) == 4 * 14 + 7  # no two rules record one series: 7 windows x 2 per service, 7 ratios


def test_the_promtool_fixture_is_what_the_generator_writes(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, out, err = generate(capsys)
    assert rc == 0
    assert out == (FIXTURES / "slo-vllm.yaml").read_text(), (
        "regenerate: gputide slo-rules --services rules/tests/fixtures/services.yaml "
        "--out rules/tests/fixtures/slo-vllm.yaml")
    assert "search: SLO 0.7 s is not a bucket boundary; requests over 0.5 s" in err


@pytest.mark.integration
@pytest.mark.parametrize("flags", [[], ["--buckets", "1,2.5,5,10,15,20,30,40,50,60"]],
                         ids=["vLLM's buckets", "an older vLLM's buckets"])
def test_promtool_accepts_the_generated_rules_with_no_duplicate(promtool, capsys, tmp_path, monkeypatch, flags):
    monkeypatch.chdir(ROOT)
    services = tmp_path / "services.yaml"
    services.write_text(PROFILES)
    out_file = tmp_path / "slo.yaml"
    rc, _, _ = generate(capsys, *flags, "--out", str(out_file), services=str(services))
    assert rc == 0
    result = subprocess.run([promtool, "check", "rules", str(out_file)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 67 rules found" in result.stdout and "duplicate" not in result.stdout + result.stderr


@pytest.mark.integration
def test_the_prometheus_rule_manifest_carries_the_same_groups_and_promtool_accepts_them(promtool, capsys, tmp_path,
                                                                                        monkeypatch):
    monkeypatch.chdir(ROOT)
    _, rules_text, _ = generate(capsys)
    rc, manifest_text, _ = generate(capsys, "--prometheus-rule", "--namespace", "monitoring")
    manifest = yaml.safe_load(manifest_text)
    assert rc == 0
    assert (manifest["apiVersion"], manifest["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert manifest["metadata"]["namespace"] == "monitoring"
    assert manifest["spec"] == yaml.safe_load(rules_text)
    spec = tmp_path / "spec.yaml"
    spec.write_text(yaml.safe_dump(manifest["spec"]))
    result = subprocess.run([promtool, "check", "rules", str(spec)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


def _alerts(objective: float = sr.DEFAULT_OBJECTIVE) -> dict[str, dict]:
    slos = sr.choose_buckets([("chat", 0.5)], sr.VLLM_E2E_BUCKETS)
    return {r["alert"]: r for g in sr.rule_groups(slos, objective) for r in g["rules"] if "alert" in r}


@pytest.mark.parametrize(("alert", "factor", "short", "long", "severity"), [
    ("InferenceSloBurnRateFast", "14.4", "5m", "1h", "critical"),
    ("InferenceSloBurnRateSlow", "6", "30m", "6h", "critical"),
    ("InferenceSloBurnRate1d", "3", "2h", "1d", "warning"),
    ("InferenceSloBurnRate3d", "1", "6h", "3d", "warning"),
], ids=["page: 14.4x over 1h and 5m", "page: 6x over 6h and 30m", "ticket: 3x over 1d and 2h",
        "ticket: 1x over 3d and 6h"])
def test_the_alerts_are_the_workbook_s_pages_and_tickets_against_a_p99_objective_with_no_for(alert, factor, short,
                                                                                             long, severity):
    rule = _alerts()[alert]
    assert rule["expr"] == (f"service:vllm_slo_violations:ratio_rate{short} > ({factor} * 0.01)\nand\n"
                            f"service:vllm_slo_violations:ratio_rate{long} > ({factor} * 0.01)\n")
    assert rule["labels"] == {"severity": severity} and "for" not in rule
    assert ("the 1% error budget of a 99% objective (the SLO is a p99 latency target)"
            in rule["annotations"]["description"])
    assert rule["annotations"]["runbook_url"].endswith("#" + alert.lower())


def test_another_objective_sets_every_threshold_and_is_stated_in_the_header_and_each_description():
    alerts = _alerts(0.995)
    assert "> (14.4 * 0.005)" in alerts["InferenceSloBurnRateFast"]["expr"]
    assert "> (1 * 0.005)" in alerts["InferenceSloBurnRate3d"]["expr"]
    assert all("the 0.5% error budget of a 99.5% objective (the SLO is a p99.5 latency target)"
               in a["annotations"]["description"] for a in alerts.values())
    assert "more than 7.2% over the last hour" in alerts["InferenceSloBurnRateFast"]["annotations"]["description"]
    text = sr.render(sr.choose_buckets([("chat", 0.5)], sr.VLLM_E2E_BUCKETS), sr.VLLM_E2E_BUCKETS, "s.yaml",
                     objective=0.995)
    header = " ".join(line.removeprefix("# ") for line in text.splitlines() if line.startswith("#"))
    assert "Objective: 99.5% of requests good (--objective 0.995: latencySloSeconds is a p99.5 target), an error " \
           "budget of 0.5%." in header


def test_a_request_vllm_finished_with_an_error_is_a_violation_in_every_window():
    slos = sr.choose_buckets([("chat", 0.5)], sr.VLLM_E2E_BUCKETS)
    violations = {r["record"]: r["expr"] for r in sr.rule_groups(slos)[0]["rules"]
                  if r["record"].startswith("service:vllm_slo_violations:rate")}
    assert sorted(violations) == sorted(f"service:vllm_slo_violations:rate{w}"
                                        for w in ("5m", "30m", "1h", "2h", "6h", "1d", "3d"))
    for window, expr in violations.items():
        assert f'rate(vllm:request_success_total{{finished_reason="error"}}[{window.rpartition("rate")[2]}])' in expr


@pytest.mark.parametrize("alert", [a.name for a in sr.BURN_ALERTS])
def test_each_generated_alert_has_a_runbook_and_a_firing_and_a_quiet_promtool_case(alert):
    anchors = {h.strip().lower() for h in re.findall(r"^## (.+)$", (ROOT / "docs" / "runbooks.md").read_text(), re.M)}
    assert alert.lower() in anchors
    tests = yaml.safe_load((ROOT / "rules" / "tests" / "gputide-slo-vllm_test.yaml").read_text())["tests"]
    evals = [e for t in tests for e in t.get("alert_rule_test", []) if e["alertname"] == alert]
    assert any(e["exp_alerts"] for e in evals) and any(not e["exp_alerts"] for e in evals)
