"""Tidal Capacity draws demand against its forecast per service: the forecast is a set of quantiles per service,
and quantiles do not add (the p90 of two services' total is not the sum of their p90s), so the panel repeats for
each service `$service` selects and each copy reads that service's demand, p50 and p90 alone. It summed every
service's p90 into one fleet-wide band.

Here two services in one cluster: chat (demand 80, p50 70, p90 100) and batch (demand 30, p50 20, p90 50).
"""

from __future__ import annotations

import pytest
from panel_eval import panel, panel_query, run

BOARD = "tidal-capacity.json"
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
    run(promtool, tmp_path, _series(), tests)


@pytest.mark.integration
def test_all_services_are_never_summed_into_one_quantile(promtool, tmp_path):
    """With every service selected (the panel not repeated, as the PNG preview draws it) the p90 is one series per
    service, 100 and 50, not a fleet line of 150 that no forecast made."""
    tests = [{"expr": panel_query(BOARD, TITLE, "forecast p90"), "eval_time": "5m",
              "exp_samples": [{"labels": f'{{service="{s}"}}', "value": v[2]} for s, v in sorted(SERVICES.items())]}]
    run(promtool, tmp_path, _series(), tests)
