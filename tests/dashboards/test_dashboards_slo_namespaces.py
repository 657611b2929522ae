"""Tidal Capacity's SLO panels keep a service's namespace: since a63d8c9 the SLO rules and alerts name a service by
(cluster, namespace, service) (balancer.telemetry.slo_rules.SERVICE_IDENTITY), and a Deployment's name can recur in
two namespaces of one cluster, each with its own budget. The panels named each line by `service` alone, so
team-a's and team-b's `chat` were two lines both called "chat" (one healthy, one burning, and no telling which).
Each line is now named `namespace/service` (`qualified_service`), or the name alone for counters without a
namespace (the simulated fleet's), and `$service` still selects every namespace's service of that name. `$service`
holds the controller's names (dashboards.capacity.controller_names): team-a/chat where chat is in two namespaces,
and that selects team-a's line alone (it selected nothing: the panels matched it against the bare `service` label).

The controller's own gauges (gputide_forecast_*, gputide_capacity_target_gpus) carry the profile's name and no
namespace of the service, so their panels stay keyed by `service`.
"""

from __future__ import annotations

import re

import pytest
from panel_eval import ALL, ROOT, panel, run

from balancer.dashboards_render import interpolate, legend

BOARD = "tidal-capacity.json"
ATTAINMENT = "SLO attainment (1h)"
BURN = "SLO burn rate"
RULES = ROOT / "rules" / "gputide-recording.yaml"
# (namespace or None, service) -> requests and violations per minute: 5 %, 0 % and 2 % of requests over their SLO
COUNTERS = {("team-a", "chat"): (600, 0), ("team-b", "chat"): (600, 30), (None, "sim"): (600, 12)}


def _labels(namespace: str | None, service: str) -> str:
    return 'cluster="c"' + (f', namespace="{namespace}"' if namespace else "") + f', service="{service}"'


def _expected(namespace: str | None, service: str) -> dict[str, str]:
    """The labels of the service's line: its identity and the name its legend shows."""
    return {"cluster": "c", **({"namespace": namespace} if namespace else {}), "service": service,
            "qualified_service": f"{namespace}/{service}" if namespace else service}


def _promql(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def test_every_slo_line_is_named_by_namespace_and_service():
    for title in (ATTAINMENT, BURN):
        targets = panel(BOARD, title)["targets"]
        assert targets and all(t["legendFormat"].startswith("{{qualified_service}}") for t in targets), title
        for t in targets:
            assert not re.search(r"\bby\s*\(\s*service\s*\)", t["expr"]), (title, t["expr"])  # no merging
            assert 'label_join(' in t["expr"] and '"namespace", "service"' in t["expr"], (title, t["expr"])


@pytest.mark.integration
@pytest.mark.parametrize("selected", [".*", "chat", "team-a/chat", "(sim|team-b/chat)"])
def test_two_namespaces_services_of_one_name_are_two_named_lines(promtool, tmp_path, selected):
    """Counters through the shipped gputide-slo rules: team-a/chat meets its SLO, team-b/chat has 5 % slow, sim
    (no namespace) 2 %. Selecting `chat` keeps both namespaces' lines; `team-a/chat` (as the controller names it)
    team-a's alone."""
    series = []
    for (namespace, service), (requests, violations) in COUNTERS.items():
        series += [{"series": f"gputide_inference_requests_total{{{_labels(namespace, service)}}}",
                    "values": f"0+{requests}x80"},
                   {"series": f"gputide_inference_slo_violations_total{{{_labels(namespace, service)}}}",
                    "values": f"0+{violations}x80"}]
    shown = {k: v for k, v in COUNTERS.items()
             if re.fullmatch(selected, k[1]) or re.fullmatch(selected, "/".join(filter(None, k)))}
    tests = []
    # the attainment line, and the burn rate's fast-page line (the lower of 5m and 1h), both constant here
    for title, digits, value in ((ATTAINMENT, 0.001, lambda r, v: 1 - v / r), (BURN, 0.01, lambda r, v: v / r / 0.01)):
        target = panel(BOARD, title)["targets"][0]
        lines = {k: _expected(*k) for k in shown}
        # each line's legend names its own service: two namespaces' chat are not two lines "chat"
        names = sorted(legend(target["legendFormat"], labels) for labels in lines.values())
        assert len(set(names)) == len(names), (title, names)
        expr = interpolate(target["expr"], {**ALL, "service": selected}, step=60, range_s=3600)
        tests.append({"expr": f"round({expr}, {digits})", "eval_time": "70m",
                      "exp_samples": [{"labels": _promql(lines[k]), "value": round(value(*shown[k]), 3)}
                                      for k in shown]})
    run(promtool, tmp_path, series, tests, rules=RULES)
