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
    exprs = {(r["record"], tuple(sorted(r["labels"].items()))): r["expr"] for r in sr.rule_groups(slos)[0]["rules"]}
    bare = exprs[("service:vllm_requests:rate5m", (("service", "llm"),))]
    qualified = exprs[("service:vllm_requests:rate5m", (("namespace", "team-a"), ("service", "llm")))]
    assert 'namespace!~"team-a|team-b"' in bare
    assert 'namespace="team-a", deployment="llm"' in qualified
    assert 'info{deployment="chat"}[5m]' in exprs[("service:vllm_requests:rate5m", (("service", "chat"),))]
    assert len(exprs) == 4 * 8  # no two rules record one series


def test_the_promtool_fixture_is_what_the_generator_writes(capsys, monkeypatch):
    monkeypatch.chdir(ROOT)
    rc, out, err = generate(capsys)
    assert rc == 0
    assert out == (FIXTURES / "slo-vllm.yaml").read_text(), (
        "regenerate: gputide slo-rules --services rules/tests/fixtures/services.yaml --out rules/tests/fixtures/slo-vllm.yaml")
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
    assert "SUCCESS: 32 rules found" in result.stdout and "duplicate" not in result.stdout + result.stderr


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
