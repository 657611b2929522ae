"""docs/metrics.md section 3 is the contract for what `gputide run` and `gputide schedule` serve: every series
either serves is a row there, with its real type and every label it carries, and every row names a series one of
them serves. Built as `gputide run` builds its registry (the reconciler, the Kubernetes actuator's quota counter,
the policy reloader's gauges, the watches) and as `gputide schedule` builds its own."""

from __future__ import annotations

import re
from pathlib import Path

from prometheus_client import CollectorRegistry

from balancer.app.policy_reload import PolicyReloader
from balancer.cli import build_parser
from balancer.cmd.run import build_reconciler
from balancer.cmd.schedule import SchedulerMetrics
from balancer.config import BalancerPolicy
from balancer.metrics import ControllerMetrics

CONTRACT = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def documented() -> dict[str, list[tuple[str, str]]]:
    """{series: [(type, the whole row), ...]} of section 3's tables (a row may name several series)."""
    section = CONTRACT.read_text().split("## 3.")[1].split("\n## ")[0]
    rows: dict[str, list[tuple[str, str]]] = {}
    for line in section.splitlines():
        if line.startswith("| `gputide_"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            for name in re.findall(r"`(gputide_[a-z_]+)(?:\{[^}]*\})?`", cells[0]):
                rows.setdefault(name, []).append((cells[1], line))
    return rows


def served(registry: CollectorRegistry) -> dict[str, tuple[str, tuple[str, ...]]]:
    """{series as queried (a counter with its `_total`): (type, label names)}."""
    out = {}
    for collector in list(registry._collector_to_names):   # labels are known before any child exists only here
        describe = getattr(collector, "describe", None)   # ProcessCollector has none
        for family in (describe and describe()) or collector.collect():
            if not family.name.startswith("gputide_"):   # prometheus_client's process_ series: not the contract's
                continue
            name = family.name + ("_total" if family.type == "counter" else "")
            out[name] = (family.type, tuple(getattr(collector, "_labelnames", ())))
    return out


def controller_registry(kubeconfig: str, tmp_path: Path) -> CollectorRegistry:
    args = build_parser().parse_args(["run", "--prometheus", "http://127.0.0.1:9", "--once", "--metrics-port", "0",
                                      "--kubeconfig", kubeconfig, "--kueue-queues", "inference,training"])
    metrics = ControllerMetrics()
    build_reconciler(args, metrics)
    policy = tmp_path / "policy.yaml"   # a long-running controller with --policy follows the file's edits
    policy.write_text("apiVersion: gputide.io/v1alpha1\nkind: BalancerPolicy\nspec: {}\n")
    PolicyReloader(policy, BalancerPolicy(), registry=metrics.registry)
    return metrics.registry


def test_every_series_served_is_documented_with_its_type_and_labels_and_nothing_else_is(kube, kubeconfig, tmp_path):
    rows = documented()
    series = {**served(controller_registry(kubeconfig, tmp_path)), **served(SchedulerMetrics().registry)}
    assert sorted(set(series) - set(rows)) == [], "served, not in docs/metrics.md section 3"
    assert sorted(set(rows) - set(series)) == [], "in docs/metrics.md section 3, served by neither"
    for name, (kind, labels) in series.items():
        for doc_type, row in rows[name]:
            assert doc_type == kind, f"{name}: documented as {doc_type}, served as {kind}"
            missing = [label for label in labels if not re.search(rf"[`{{,]{label}[`}},]", row)]
            assert not missing, f"{name}: labels {missing} not in its row"
