"""Tidal Capacity draws demand against its forecast per service: the forecast is a set of quantiles per service,
and quantiles do not add (the p90 of two services' total is not the sum of their p90s), so the panel repeats for
each service `$service` selects and each copy reads that service's demand, p50 and p90 alone. It summed every
service's p90 into one fleet-wide band.

Here two services in one cluster: chat (demand 80, p50 70, p90 100) and batch (demand 30, p50 20, p90 50).
"""

from __future__ import annotations

import json
import re

import pytest
from panel_eval import ALL, ROOT, panel, panel_query, run

from balancer.dashboards_render import interpolate

BOARD = "tidal-capacity.json"
# the recording rules name the services (service:inference_controller_name:info), which the panels join on
RULES = ROOT / "rules" / "gputide-recording.yaml"
TITLE = "Demand vs forecast: $service"
SERVICES = {"chat": (80, 70, 100), "batch": (30, 20, 50)}


def _series() -> list[dict]:
    out = []
    for service, (demand, p50, p90) in SERVICES.items():
        labels = f'cluster="c1", job="gputide-controller", instance="ctl-0:9836", service="{service}"'
        out += [{"series": f'gputide_inference_demand_rps{{cluster="c1", service="{service}"}}',
                 "values": f"{demand}x10"},
                {"series": f'gputide_forecast_for_now{{{labels}, quantile="0.5", horizon="30m"}}',
                 "values": f"{p50}x10"},
                {"series": f'gputide_forecast_for_now{{{labels}, quantile="0.9", horizon="30m"}}',
                 "values": f"{p90}x10"}]
    return out


def test_the_panel_repeats_per_service_of_a_multi_select_service_variable_and_says_why():
    p = panel(BOARD, TITLE)
    assert (p["repeat"], p["repeatDirection"]) == ("service", "v")
    assert "quantiles do not add" in p["description"]


@pytest.mark.integration
@pytest.mark.parametrize("service", sorted(SERVICES))
def test_each_services_panel_reads_its_own_demand_and_quantiles(promtool, tmp_path, service):
    tests = [{"expr": panel_query(BOARD, TITLE, legend, {"service": service}), "eval_time": "5m",
              "exp_samples": [{"labels": f'{{service="{service}"}}', "value": value}]}
             for legend, value in zip(("demand", "forecast p50", "forecast p90"), SERVICES[service], strict=True)]
    run(promtool, tmp_path, _series(), tests, rules=RULES)


@pytest.mark.integration
def test_all_services_are_never_summed_into_one_quantile(promtool, tmp_path):
    """With every service selected (the panel not repeated, as the PNG preview draws it) the p90 is one series per
    service, 100 and 50, not a fleet line of 150 that no forecast made."""
    tests = [{"expr": panel_query(BOARD, TITLE, "forecast p90"), "eval_time": "5m",
              "exp_samples": [{"labels": f'{{service="{s}"}}', "value": v[2]} for s, v in sorted(SERVICES.items())]}]
    run(promtool, tmp_path, _series(), tests, rules=RULES)


# A cluster where the Deployment name vllm is in two namespaces: the controller reads them as team-a/vllm and
# team-b/vllm (balancer.telemetry.serving.read_services), their profiles are named so and its gauges carry those names
# (a `namespace` label on them is the controller's own). chat is in one namespace: plain `chat`, its demand scraped by
# two jobs (the controller reads the higher, one demand). service -> ((namespace, demand), p50, p90, GPU target).
NAMED = {"team-a/vllm": (("team-a", 80), 70, 100, 4), "team-b/vllm": (("team-b", 30), 20, 50, 2),
         "chat": (("team-a", 50), 40, 60, 3)}


def _named_series() -> list[dict]:
    out = []
    for name, ((namespace, demand), p50, p90, gpus) in NAMED.items():
        bare = name.rpartition("/")[2]
        jobs = ("vllm-a", "vllm-b") if name == "chat" else ("vllm-a",)
        out += [{"series": f'gputide_inference_demand_rps{{cluster="c1", job="{job}", namespace="{namespace}", '
                           f'service="{bare}"}}', "values": f"{demand}x10"} for job in jobs]
        # the controller's gauges, its chat forecast also from a second scrape job (a copy, never added)
        for job in ("gputide-controller", "gputide-controller-copy")[:1 + (name == "chat")]:
            ctl = f'cluster="c1", job="{job}", namespace="gputide", service="{name}"'
            out += [{"series": f'gputide_forecast_for_now{{{ctl}, quantile="{q}", horizon="30m"}}', "values": f"{v}x10"}
                    for q, v in (("0.5", p50), ("0.9", p90))]
            out.append({"series": f"gputide_capacity_target_gpus{{{ctl}}}", "values": f"{gpus}x10"})
    return out


@pytest.mark.integration
@pytest.mark.parametrize("service", sorted(NAMED))
def test_demand_is_named_as_the_controller_names_the_service_and_lines_up_with_its_forecast(promtool, tmp_path,
                                                                                             service):
    """Selecting team-a/vllm (as the controller's gauges name it) reads team-a's demand beside team-a/vllm's p50, p90
    and GPU target; chat's demand published twice reads 50, not 100. The demand was selected and summed by the bare
    `service` label: `vllm` drew 110 (both namespaces') against no forecast, team-a/vllm drew no demand at all, and
    chat read 100."""
    (_, demand), p50, p90, gpus = NAMED[service]
    legends = {(TITLE, "demand"): demand, (TITLE, "forecast p50"): p50, (TITLE, "forecast p90"): p90,
               ("GPUs the forecast asks for", "{{service}} target"): gpus}
    tests = [{"expr": panel_query(BOARD, title, legend, {"service": service}), "eval_time": "5m",
              "exp_samples": [{"labels": f'{{service="{service}"}}', "value": value}]}
             for (title, legend), value in legends.items()]
    run(promtool, tmp_path, _named_series(), tests, rules=RULES)


@pytest.mark.integration
def test_the_service_variable_lists_the_controllers_names(promtool, tmp_path):
    """`$service` lists each service under the controller's name (query_result's series, the variable's regex taking
    their `service`): team-a/vllm, team-b/vllm and chat, the `service` values of its forecast gauges, where the
    bare label listed `vllm` (matching none of them) and `chat`. With every service selected the demand is one line
    per name."""
    var = next(v for v in json.loads((ROOT / "dashboards" / BOARD).read_text())["templating"]["list"]
               if v["name"] == "service")
    query = interpolate(var["query"]["query"], ALL, step=60, range_s=3600)
    assert query.startswith("query_result(") and query.endswith(")")
    assert var["query"]["qryType"] == 3   # Grafana's editor opens it as a query_result, not as label_values
    # a line as Grafana lists query_result's answer: the regex takes `service`, never `namespace`
    line = '{cluster="c1", namespace="team-a", service="team-a/vllm"} 80 1700000000'
    assert re.findall(var["regex"].strip("/"), line) == ["team-a/vllm"]
    listed = [{"labels": f'{{service="{s}"}}', "value": 1} for s in sorted(NAMED)]
    tests = [{"expr": f"group by (service) ({query[len('query_result('):-1]})", "eval_time": "5m",
              "exp_samples": listed},
             {"expr": "group by (service) (gputide_forecast_for_now)", "eval_time": "5m", "exp_samples": listed},
             {"expr": panel_query(BOARD, TITLE, "demand"), "eval_time": "5m",
              "exp_samples": [{"labels": f'{{service="{s}"}}', "value": v[0][1]} for s, v in sorted(NAMED.items())]}]
    run(promtool, tmp_path, _named_series(), tests, rules=RULES)


def _service_variable_query(range_s: int) -> str:
    """`$service`'s query as Grafana runs it over a time range of `range_s` (query_result's argument)."""
    var = next(v for v in json.loads((ROOT / "dashboards" / BOARD).read_text())["templating"]["list"]
               if v["name"] == "service")
    assert var["refresh"] == 2   # on time range change: $__range is the range shown
    return interpolate(var["query"]["query"], ALL, step=60, range_s=range_s)[len("query_result("):-1]


@pytest.mark.integration
def test_the_service_variable_lists_every_name_seen_over_the_time_range(promtool, tmp_path):
    """query_result is one instant query at the range's end: over 0-30m, team-b's vllm and `gone` stopped at 10m,
    and the variable listed only `vllm` (team-a's, alone since), so under All neither team-b/vllm's nor gone's
    panel, nor team-a's first 10 minutes as team-a/vllm, were drawn. It lists every name the demand had within the
    range, and a name only the controller's forecast carries (`queued`, no demand yet)."""
    series = [{"series": f'gputide_inference_demand_rps{{cluster="c1", namespace="{n}", service="{s}"}}',
               "values": v} for n, s, v in (("team-a", "vllm", "80x30"), ("team-b", "vllm", "30x10"),
                                            ("team-a", "gone", "5x10"))]
    series.append({"series": 'gputide_forecast_for_now{cluster="c1", service="queued", quantile="0.5"}',
                   "values": "_x20 7x10"})
    listed = ["gone", "queued", "team-a/vllm", "team-b/vllm", "vllm"]
    tests = [{"expr": f"group by (service) ({_service_variable_query(1800)})", "eval_time": "30m",
              "exp_samples": [{"labels": f'{{service="{s}"}}', "value": 1} for s in listed]}]
    run(promtool, tmp_path, series, tests, rules=RULES)


@pytest.mark.integration
def test_one_clusters_unknown_demand_does_not_blank_the_others(promtool, tmp_path):
    """chat in clusters c1 and c2 with $cluster at All: c1's demand is NaN (no request in its window, unknown),
    c2's 40. The sum over clusters read NaN, no line at all; it reads c2's 40. With every cluster's unknown, no
    value (a gap), never 0."""
    nan = " ".join(["NaN"] * 11)
    series = [{"series": f'gputide_inference_demand_rps{{cluster="{c}", namespace="team-a", service="{s}"}}',
               "values": v} for c, s, v in (("c1", "chat", nan), ("c2", "chat", "40x10"), ("c1", "idle", nan))]
    tests = [{"expr": panel_query(BOARD, TITLE, "demand", {"service": "chat"}), "eval_time": "5m",
              "exp_samples": [{"labels": '{service="chat"}', "value": 40}]},
             {"expr": panel_query(BOARD, TITLE, "demand", {"service": "idle"}), "eval_time": "5m", "exp_samples": []}]
    run(promtool, tmp_path, series, tests, rules=RULES)
