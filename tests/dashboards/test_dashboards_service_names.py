"""Tidal Capacity reads its services' names from the recording rules (rules/gputide-recording.yaml:
service:inference_controller_name:info for the demand and `$service`, service:inference_slo_name:info for the SLO
lines). Each query pasted the PromQL that works a name out, the namespaces per name counted (`count by (cluster,
service)`) twice per series named: a burn-rate line ran to 1,940 characters, and `$service` ran it at every step of a
subquery over the time range (`[$__range:]`: 43,000 steps over 30 days). The panels' values and names are pinned by
test_dashboards_demand_forecast, test_dashboards_slo_namespaces and test_dashboards_burn_rate (now through the rules),
the names themselves by rules/tests/gputide-service-names_test.yaml."""

from __future__ import annotations

import json

import pytest
from panel_eval import ALL, ROOT, panel_query, run

from balancer.dashboards_render import interpolate

BOARD = json.loads((ROOT / "dashboards" / "tidal-capacity.json").read_text())
QUERIES = {f"{p['title']}: {t.get('legendFormat')}": t["expr"] for p in BOARD["panels"] for t in p.get("targets", [])}
SERVICE = next(v for v in BOARD["templating"]["list"] if v["name"] == "service")["query"]["query"]
RULES = ROOT / "rules" / "gputide-recording.yaml"


@pytest.mark.parametrize("name", sorted(QUERIES) + ["$service"])
def test_no_query_works_a_services_name_out(name):
    """The demand alone names a series the rule has not named (history from before it was loaded) by its bare name,
    one count of its namespaces (test_dashboards_service_name_changes); none pastes the naming."""
    expr = SERVICE if name == "$service" else QUERIES[name]
    demand = name == "Demand vs forecast: $service: demand"
    assert expr.count("count by (cluster, service)") == demand and "label_join(group" not in expr, name
    assert len(expr) <= (1050 if demand else 850), (name, len(expr))


def test_the_service_variable_reads_the_recorded_names_over_the_range_with_no_subquery():
    assert ":]" not in SERVICE
    assert "last_over_time(service:inference_controller_name:info{" in SERVICE


def test_the_named_queries_read_the_recorded_names():
    named = {k: v for k, v in QUERIES.items() if k.startswith(("Demand vs forecast: $service: demand", "SLO "))}
    assert len(named) == 6
    for name, expr in named.items():
        table = "service:inference_controller_name:info{" if "demand" in name else "service:inference_slo_name:info{"
        assert table in expr and 'controller_service=~"$service"' in expr, name


@pytest.mark.integration
def test_a_name_table_read_twice_is_joined_once(promtool, tmp_path):
    """Two Prometheus servers read without deduplication give each recorded name twice (a `replica` label apart):
    each line joins one name, not a many-to-many error that blanks the panel."""
    series = [{"series": f'gputide_inference_demand_rps{{cluster="c1", namespace="{n}", service="vllm"}}',
               "values": f"{v}x10"} for n, v in (("team-a", 80), ("team-b", 30))]
    for table in ("service:inference_controller_name:info", "service:inference_slo_name:info"):
        series += [{"series": f'{table}{{cluster="c1", namespace="{n}", service="vllm", controller_service="{n}/vllm", '
                              'replica="b"}', "values": "1x10"} for n in ("team-a", "team-b")]
    series += [{"series": f'service:inference_slo_violations:ratio_rate1h{{cluster="c1", namespace="{n}", '
                          f'service="vllm"}}', "values": "0.01x10"} for n in ("team-a", "team-b")]
    attainment = interpolate(QUERIES["SLO attainment (1h): {{qualified_service}}"], ALL, step=60, range_s=3600)
    tests = [{"expr": panel_query("tidal-capacity.json", "Demand vs forecast: $service", "demand"), "eval_time": "5m",
              "exp_samples": [{"labels": '{service="team-a/vllm"}', "value": 80},
                              {"labels": '{service="team-b/vllm"}', "value": 30}]},
             {"expr": f"round({attainment}, 0.001)", "eval_time": "5m", "exp_samples": [
                 {"labels": f'{{cluster="c1", namespace="{n}", service="vllm", qualified_service="c1: {n}/vllm"}}',
                  "value": 0.99} for n in ("team-a", "team-b")]}]
    run(promtool, tmp_path, series, tests, rules=RULES)
