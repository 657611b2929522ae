"""The demo's hotspot table: policy none runs no controller, so it has no reconcile latency ("-"), not 0 ms."""

from __future__ import annotations

from balancer.app import scenarios
from balancer.app.demo import HOTSPOT_KEYS, without_idle_latency
from balancer.app.report import Report


def _row(html: str, label: str) -> str:
    return html.split(f"<td>{label}</td>", 1)[1].split("</tr>", 1)[0]


def test_policy_none_has_no_reconcile_latency_and_gputide_keeps_its_own(tmp_path):
    results = {}
    for policy in ("none", "gputide"):
        sim, events, _ = scenarios.build("hotspot", seed=0, days=0.02)
        results[policy] = without_idle_latency(scenarios.run_simulation(
            sim, policy, 0.02, 60.0, tmp_path / policy, events=events, scenario="hotspot", plots=False))
    assert "reconcile_p50_ms" not in results["none"]["controller"]
    assert results["none"]["controller"]["cycles"] == 0
    assert results["gputide"]["controller"]["reconcile_p50_ms"] > 0
    report = Report("t")
    report.mapping_table(results, HOTSPOT_KEYS)
    for label in ("reconcile p50 (ms)", "reconcile p99 (ms)"):
        none_cell, gputide_cell = _row(report.parts[-1], label).split("</td><td>")
        assert none_cell == "<td>-" and gputide_cell.rstrip("</td>") not in ("-", "0")
