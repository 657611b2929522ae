"""Tidal Capacity's SLO panels keep a service's namespace: since a63d8c9 the SLO rules and alerts name a service by
(cluster, namespace, service) (balancer.telemetry.slo_rules.SERVICE_IDENTITY), and a Deployment's name can recur in
two namespaces of one cluster, each with its own budget. The panels named each line by `service` alone, so
team-a's and team-b's `chat` were two lines both called "chat" (one healthy, one burning, and no telling which).
Each line is named as the controller names the service in its cluster (service:inference_slo_name:info, recorded):
`namespace/service` where the cluster has the name in two namespaces, else the name alone (and for counters without
a namespace, the simulated fleet's), after the series' cluster where it has one (`c: team-a/chat`). `$service`
holds the controller's names and selects a line by that name alone: team-a/chat selects team-a's line, `chat`
none here (the controller has no service `chat` in cluster c).

With two clusters, c1 with vllm in team-a and team-b and c2 with vllm in team-a only (the controller calls c2's
`vllm`), team-a/vllm selected c1's and c2's lines, both named team-a/vllm, and `vllm` selected all three: each
namespace's line was named namespace/service whatever its cluster, and `$service` also matched the bare label.

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
    """The labels of the service's line: its identity and the name its legend shows (chat is in two namespaces)."""
    return {"cluster": "c", **({"namespace": namespace} if namespace else {}), "service": service,
            "qualified_service": "c: " + (f"{namespace}/{service}" if namespace else service)}


def _promql(labels: dict[str, str]) -> str:
    return "{" + ", ".join(f'{k}="{v}"' for k, v in labels.items()) + "}"


def test_every_slo_line_is_named_by_namespace_and_service():
    for title in (ATTAINMENT, BURN):
        targets = panel(BOARD, title)["targets"]
        assert targets and all(t["legendFormat"].startswith("{{qualified_service}}") for t in targets), title
        for t in targets:
            assert not re.search(r"\bby\s*\(\s*service\s*\)", t["expr"]), (title, t["expr"])  # no merging
            # named by the recorded name of its (cluster, namespace, service)
            assert "on (cluster, namespace, service) group_left (controller_service)" in t["expr"], (title, t["expr"])
            assert "service:inference_slo_name:info{" in t["expr"], (title, t["expr"])


@pytest.mark.integration
@pytest.mark.parametrize("selected", [".*", "chat", "team-a/chat", "(sim|team-b/chat)"])
def test_two_namespaces_services_of_one_name_are_two_named_lines(promtool, tmp_path, selected):
    """Counters through the shipped gputide-slo rules: team-a/chat meets its SLO, team-b/chat has 5 % slow, sim
    (no namespace) 2 %. `team-a/chat` (as the controller names it) selects team-a's line alone; `chat`, no name of
    the controller's here, none."""
    series = []
    for (namespace, service), (requests, violations) in COUNTERS.items():
        series += [{"series": f"gputide_inference_requests_total{{{_labels(namespace, service)}}}",
                    "values": f"0+{requests}x80"},
                   {"series": f"gputide_inference_slo_violations_total{{{_labels(namespace, service)}}}",
                    "values": f"0+{violations}x80"}]
    shown = {k: v for k, v in COUNTERS.items() if re.fullmatch(selected, "/".join(filter(None, k)))}
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


# service:inference_slo_violations:ratio_rate1h per (cluster, namespace), all of Deployment vllm: c1 has it in two
# namespaces, c2 in team-a alone (the controller's `vllm` there); each line's name.
CLUSTERS = {("c1", "team-a"): 0.01, ("c1", "team-b"): 0.02, ("c2", "team-a"): 0.03}
NAMES = {("c1", "team-a"): "c1: team-a/vllm", ("c1", "team-b"): "c1: team-b/vllm", ("c2", "team-a"): "c2: vllm"}


def _attainment(selected: str, lines: dict[tuple[str, str], str]) -> dict:
    """The attainment panel's query with `$service` at `selected`, expecting each (cluster, namespace)'s line of
    `lines` under its name."""
    target = panel(BOARD, ATTAINMENT)["targets"][0]
    assert all(legend(target["legendFormat"], {"qualified_service": name}) == name for name in lines.values())
    expr = interpolate(target["expr"], {**ALL, "service": selected}, step=60, range_s=3600)
    return {"expr": f"round({expr}, 0.001)", "eval_time": "5m", "exp_samples": [
        {"labels": _promql({"cluster": c, "namespace": n, "service": "vllm", "qualified_service": name}),
         "value": round(1 - CLUSTERS[(c, n)], 3)} for (c, n), name in lines.items()]}


def _ratio(cluster: str, namespace: str) -> dict:
    return {"series": f'service:inference_slo_violations:ratio_rate1h{{cluster="{cluster}", namespace="{namespace}", '
                      f'service="vllm"}}', "values": f"{CLUSTERS[(cluster, namespace)]}x10"}


@pytest.mark.integration
@pytest.mark.parametrize("selected, lines", [
    (".*", list(CLUSTERS)), ("team-a/vllm", [("c1", "team-a")]), ("vllm", [("c2", "team-a")]),
    ("(team-b/vllm|vllm)", [("c1", "team-b"), ("c2", "team-a")]),
])
def test_each_clusters_lines_are_named_as_its_controller_names_them(promtool, tmp_path, selected, lines):
    """Each line is named after its cluster and as that cluster's controller names the service: `vllm` selects c2's
    line alone and team-a/vllm c1's team-a line alone, where both selected lines of two clusters named alike."""
    run(promtool, tmp_path, [_ratio(*k) for k in CLUSTERS], [_attainment(selected, {k: NAMES[k] for k in lines})],
        rules=RULES)


@pytest.mark.integration
@pytest.mark.parametrize("demand", [True, False])
def test_the_demand_names_a_service_whose_other_namespace_has_no_slo_series(promtool, tmp_path, demand):
    """The controller names a service by its serving series (the demand): c1's team-b vllm serves but records no
    SLO series, and c1's team-a line is still team-a/vllm, as $service lists it; without that demand it is vllm."""
    series = [_ratio("c1", "team-a")] + [
        {"series": f'gputide_inference_demand_rps{{cluster="c1", namespace="{n}", service="vllm"}}', "values": "5x10"}
        for n in ("team-a", "team-b") if demand]
    name = "c1: team-a/vllm" if demand else "c1: vllm"
    run(promtool, tmp_path, series, [_attainment(".*", {("c1", "team-a"): name})], rules=RULES)
