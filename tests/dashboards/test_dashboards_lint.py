"""The committed dashboards are up to date with their sources and pass every lint rule; each rule catches
the defect it is named after."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest

pytest.importorskip("grafana_foundation_sdk")

from dashboards import build  # noqa: E402
from dashboards.lint import RULES, lint, panels, targets  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_UIDS = {
    "gpu-fleet": "gputide-gpu-fleet",
    "tidal-capacity": "gputide-tidal-capacity",
    "balancer": "gputide-balancer",
    "fragmentation-utilisation": "gputide-fragmentation",
    "usage-chargeback": "gputide-chargeback",
}


def committed(name: str) -> dict:
    return json.loads((ROOT / "dashboards" / f"{name}.json").read_text())


def test_committed_json_matches_a_fresh_build(tmp_path):
    build.build_all(tmp_path)
    for name in build.DASHBOARDS:
        fresh = (tmp_path / f"{name}.json").read_text()
        assert (ROOT / "dashboards" / f"{name}.json").read_text() == fresh, (
            f"dashboards/{name}.json is out of date: run python -m dashboards.build")


def test_check_mode_reports_a_stale_file(tmp_path):
    build.build_all(tmp_path)
    assert build.main(["--check", "--out", str(tmp_path)]) == 0
    (tmp_path / "balancer.json").write_text("{}\n")
    assert build.stale(tmp_path) == ["balancer"]
    assert build.main(["--check", "--out", str(tmp_path)]) == 1


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_dashboard_passes_every_lint_rule(name):
    assert lint(committed(name)) == {}


def test_uids_are_stable_and_unique():
    uids = {name: committed(name)["uid"] for name in build.DASHBOARDS}
    assert uids == EXPECTED_UIDS
    assert len(set(uids.values())) == len(uids)


def _contract_names() -> set[str]:
    text = (ROOT / "docs" / "metrics.md").read_text()
    for rules in (ROOT / "rules").glob("*.yaml"):
        text += rules.read_text()
    return set(re.findall(r"[a-z_]+:[a-z_0-9]+:[a-z_0-9]+|gputide_[a-z_0-9]+", text))


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_every_series_is_in_the_metric_contract(name):
    known = _contract_names()
    used = set()
    for _, target in targets(committed(name)):
        used |= set(re.findall(r"[a-z_]+:[a-z_0-9]+:[a-z_0-9]+|gputide_[a-z_0-9]+", target["expr"]))
    unknown = {u for u in used if u not in known and u.removesuffix("_bucket") not in known}
    assert used and not unknown


def test_fleet_heatmaps_draw_one_row_per_gpu_or_per_mig_instance():
    heatmaps = {p["title"]: p for p in panels(committed("gpu-fleet")) if p["type"] == "heatmap"}
    assert set(heatmaps) == {"GPU temperature", "GPU power", "SM activity", "Memory used",
                             "SM activity per MIG instance"}
    for title, p in heatmaps.items():
        assert p["options"]["calculate"] is False
        mig = title == "SM activity per MIG instance"
        assert p["targets"][0]["legendFormat"] == (
            "{{hostname}}/{{gpu}}/{{GPU_I_ID}} {{GPU_I_PROFILE}}" if mig else "{{hostname}}/{{gpu}}")
        assert p["targets"][0]["expr"].startswith("gpu_instance:sm_active:ratio{" if mig else "gpu:")


def _first(dashboard: dict, kind: str = "") -> dict:
    return next(p for p in panels(dashboard) if not kind or p["type"] == kind)


def _break_datasource_variable(d):
    d["templating"]["list"] = [v for v in d["templating"]["list"] if v["name"] != "datasource"]


def _break_panel_datasource(d):
    _first(d)["targets"][0]["datasource"] = {"type": "prometheus", "uid": "prometheus-prod"}


def _drop_description(d):
    _first(d)["description"] = ""


def _drop_unit(d):
    _first(d)["fieldConfig"]["defaults"].pop("unit")


def _fixed_rate_window(d):
    _first(d)["targets"][0]["expr"] = 'sum(rate(gputide_reconcile_total{cluster=~"$cluster"}[5m]))'


def _wrong_variable_label(d):
    var = next(v for v in d["templating"]["list"] if v["name"] == "node")
    var["query"]["query"] = "label_values(gpu:temperature:celsius, Hostname)"


def _missing_cluster_filter(d):
    _first(d)["targets"][0]["expr"] = "count(gpu:temperature:celsius)"


def _missing_node_filter(d):
    _first(d)["targets"][0]["expr"] = 'count(gpu:temperature:celsius{cluster=~"$cluster"})'


def _raw_dcgm(d):
    _first(d)["targets"][0]["expr"] = 'max(DCGM_FI_DEV_GPU_TEMP{cluster=~"$cluster"})'


def _past_the_edge(d):
    _first(d)["gridPos"].update(x=18, w=12)


def _overlapping(d):
    first, second = list(panels(d))[:2]
    second["gridPos"].update(x=first["gridPos"]["x"], y=first["gridPos"]["y"])


@pytest.mark.parametrize(
    ("rule", "breakage"),
    [
        ("template-datasource", _break_datasource_variable),
        ("panel-datasource", _break_panel_datasource),
        ("panel-title-description", _drop_description),
        ("panel-units", _drop_unit),
        ("target-rate-interval", _fixed_rate_window),
        ("template-variables", _wrong_variable_label),
        ("target-label-filters", _missing_cluster_filter),
        ("target-label-filters", _missing_node_filter),
        ("target-normalised-series", _raw_dcgm),
        ("panel-grid", _past_the_edge),
        ("panel-grid", _overlapping),
    ],
    ids=[
        "a dashboard without a datasource variable is flagged",
        "a panel pinned to a fixed datasource is flagged",
        "a panel without a description is flagged",
        "a panel without a unit is flagged",
        "a rate over a fixed 5m window is flagged",
        "a node variable over the raw Hostname label is flagged",
        "a query without the cluster filter is flagged",
        "a per-GPU selector without node and model filters is flagged",
        "a raw DCGM series is flagged",
        "a panel past the 24th column is flagged",
        "two panels on the same cells are flagged",
    ],
)
def test_each_rule_catches_its_defect(rule, breakage):
    dashboard = copy.deepcopy(committed("gpu-fleet"))
    breakage(dashboard)
    assert rule in RULES
    assert rule in lint(dashboard)


def _variable(name: str) -> dict:
    return copy.deepcopy(next(v for v in committed("gpu-fleet")["templating"]["list"] if v["name"] == name))


@pytest.mark.parametrize("name", sorted(build.DASHBOARDS))
def test_every_variable_is_read_by_a_panel(name):
    """A dashboard offers only the variables its panels read: the Balancer, Tidal Capacity and Usage & Chargeback
    dashboards offered $node and $model, which no query of theirs named, so picking a node changed no line."""
    d = committed(name)
    used = {m for _, t in targets(d) for m in re.findall(r"\$\{?(\w+)", t["expr"])}
    used |= {p["repeat"] for p in panels(d) if p.get("repeat")}
    offered = {v["name"] for v in d["templating"]["list"] if v["type"] == "query"}
    assert offered <= used, offered - used


def test_a_variable_no_panel_reads_is_flagged():
    d = copy.deepcopy(committed("balancer"))
    d["templating"]["list"] += [_variable("node")]
    assert "variable 'node' is used by no panel query: it selects nothing" in lint(d)["template-variables"]


def test_a_query_naming_an_undefined_variable_is_flagged():
    d = copy.deepcopy(committed("balancer"))
    _first(d)["targets"][0]["expr"] = 'sum(gputide_reconcile_total{cluster=~"$cluster", hostname=~"$node"})'
    assert any("names $node, which no variable defines" in m for m in lint(d)["template-variables"])


def test_a_variable_chained_on_a_missing_one_is_flagged():
    """The model variable lists the models of the selected nodes: without a node variable its query would keep a
    literal `$node`."""
    d = copy.deepcopy(committed("balancer"))
    d["templating"]["list"] += [_variable("model")]
    assert "variable 'model' names $node, which no variable defines" in lint(d)["template-variables"]
