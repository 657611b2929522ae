"""Tidal Capacity joins each series to one recorded name (service:inference_controller_name:info,
service:inference_slo_name:info) while a service is renamed, and draws the demand from before the names were recorded.

c628c46 joined on `max by (cluster, namespace, service, controller_service)` of the table: while a (cluster, namespace,
service) had two names, the join had two matches for it and the whole range query failed ('many-to-many matching not
allowed'): two Prometheus servers read without deduplication renaming one evaluation apart, or a restarted one whose
last name lingers the lookback's 5 minutes beside the renamed one (no stale marker is written across a restart). Now
the newest name is joined, one per series, and `$service` selects after the choice: a line is never drawn under both
names. The demand from before the rules were loaded (a month of 30-day views after the upgrade) was blank: it is now
named by its bare `service` where the rule would name it so (no namesake in another namespace of its cluster)."""

from __future__ import annotations

import pytest
from panel_eval import ROOT, panel_query, run

BOARD = "tidal-capacity.json"
DEMAND = ("tidal-capacity.json", "Demand vs forecast: $service", "demand")
RULES = ROOT / "rules" / "gputide-recording.yaml"
TABLES = ("service:inference_controller_name:info", "service:inference_slo_name:info")
SLO = 'service:inference_slo_violations:ratio_rate1h{cluster="c1", namespace="team-a", service="vllm"}'
DEMAND_SERIES = 'gputide_inference_demand_rps{cluster="c1", namespace="team-a", service="vllm"}'


def _demand(service: str) -> str:
    return panel_query(*DEMAND, {"service": service})


def _attainment() -> str:
    return panel_query(BOARD, "SLO attainment (1h)", "{{qualified_service}}")


def _names(name: str, values: str, replica: str = "") -> list[dict]:
    extra = f', replica="{replica}"' if replica else ""
    return [{"series": f'{t}{{cluster="c1", namespace="team-a", service="vllm", controller_service="{name}"{extra}}}',
             "values": values} for t in TABLES]


def _one(expr: str, value: float, eval_time: str) -> list[dict]:
    """`expr` is one series of `value` at `eval_time` (whichever name it has)."""
    return [{"expr": f"count({expr})", "eval_time": eval_time, "exp_samples": [{"value": 1}]},
            {"expr": f"round(sum({expr}), 0.001)", "eval_time": eval_time, "exp_samples": [{"value": value}]}]


@pytest.mark.integration
def test_two_servers_renaming_one_evaluation_apart_give_one_line_not_a_failed_query(promtool, tmp_path):
    """Replica a renames team-a/vllm to vllm at 5m, replica b at 6m: at 5m each has one name. The demand is one line,
    drawn in one of the two names' panels (never both), and the SLO line one."""
    series = [{"series": DEMAND_SERIES.replace("}", f', replica="{r}"}}'), "values": "80x10"} for r in "ab"]
    series += [{"series": SLO, "values": "0.01x10"}]
    series += (_names("team-a/vllm", "1x4 stale", "a") + _names("vllm", "_x5 1x5", "a")
               + _names("team-a/vllm", "1x5 stale", "b") + _names("vllm", "_x6 1x4", "b"))
    either = f'({_demand("vllm")}) or ({_demand("team-a/vllm")})'
    run(promtool, tmp_path, series, _one(_demand(".*"), 80, "5m") + _one(either, 80, "5m")
        + _one(_attainment(), 0.99, "5m"))


@pytest.mark.integration
def test_a_restarted_servers_lingering_name_yields_to_the_renamed_one(promtool, tmp_path):
    """A Prometheus restarted at 5m renames team-a/vllm to vllm (team-b's vllm went while it was down): its last
    team-a/vllm sample, at 4m, is read until 9m beside vllm. The line is vllm's alone."""
    series = [{"series": DEMAND_SERIES, "values": "80x10"}, {"series": SLO, "values": "0.01x10"}]
    series += _names("team-a/vllm", "1x4") + _names("vllm", "_x5 1x5")
    tests = [{"expr": _demand(".*"), "eval_time": "7m", "exp_samples": [{"labels": '{service="vllm"}', "value": 80}]},
             {"expr": _demand("vllm"), "eval_time": "7m", "exp_samples": [{"labels": '{service="vllm"}', "value": 80}]},
             {"expr": _demand("team-a/vllm"), "eval_time": "7m", "exp_samples": []},
             {"expr": f"round({_attainment()}, 0.001)", "eval_time": "7m", "exp_samples": [{
                 "labels": '{cluster="c1", namespace="team-a", service="vllm", qualified_service="c1: vllm"}',
                 "value": 0.99}]}]
    run(promtool, tmp_path, series, tests)


def _raw(namespace: str, service: str, demand: float) -> dict:
    return {"series": f'gputide_inference_demand_rps{{cluster="c1", namespace="{namespace}", service="{service}"}}',
            "values": f"{demand}x10"}


@pytest.mark.integration
def test_the_demand_from_before_the_names_were_recorded_is_drawn_where_its_name_is_its_own(promtool, tmp_path):
    """No rule loaded (history from before the upgrade): chat (one namespace) is drawn as chat, as the rule names it;
    team-a's and team-b's vllm, which the rule names team-a/vllm and team-b/vllm, are not drawn under a name the rule
    never gives them (their demand added into one vllm line)."""
    series = [_raw("team-a", "chat", 50), _raw("team-a", "vllm", 80), _raw("team-b", "vllm", 30)]
    tests = [{"expr": _demand(".*"), "eval_time": "5m", "exp_samples": [{"labels": '{service="chat"}', "value": 50}]},
             {"expr": _demand("chat"), "eval_time": "5m", "exp_samples": [{"labels": '{service="chat"}', "value": 50}]},
             {"expr": _demand("vllm"), "eval_time": "5m", "exp_samples": []}]
    run(promtool, tmp_path, series, tests)


@pytest.mark.integration
def test_the_recorded_name_wins_over_the_bare_one_once_recorded(promtool, tmp_path):
    """With the rule loaded, a name recorded is the only one: team-a/vllm (team-b's vllm still serving) is its own
    line, and chat is one line whether named by the rule or, before it, by its bare name."""
    series = [_raw("team-a", "chat", 50), _raw("team-a", "vllm", 80), _raw("team-b", "vllm", 30)]
    tests = [{"expr": _demand(".*"), "eval_time": "5m", "exp_samples": [
        {"labels": '{service="chat"}', "value": 50}, {"labels": '{service="team-a/vllm"}', "value": 80},
        {"labels": '{service="team-b/vllm"}', "value": 30}]}]
    run(promtool, tmp_path, series, tests, rules=RULES)


def test_only_the_demand_names_a_series_with_no_recorded_name():
    """The SLO lines have no fallback (the SLO name counts the namespaces of two series sets, and four burn-rate
    lines would each paste it): from before the rules were loaded they are not drawn, as the module says."""
    assert "unless on (cluster, namespace, service) service:inference_controller_name:info{" in _demand(".*")
    assert "unless" not in _attainment()
