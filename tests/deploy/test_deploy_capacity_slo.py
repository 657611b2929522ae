"""The capacity overlay ships the SLO rules of the services it ships: it records the serving series from vLLM
(rules/serving/vllm.yaml), and for a service on vLLM the request and violation rates that only `gputide slo-rules`
derives from vLLM's histogram, with the burn-rate alerts on them (the base's InferenceSloBurnRate* skip the services
it covers; its gputide-slo group reads the rates for the dashboards). Without them the overlay
shipped a profiled service whose SLO burn no alert could ever see (InferenceSloBurnRate* never fired, the
dashboard's SLO panels stayed empty)."""

from __future__ import annotations

import shutil
import subprocess

import yaml
from test_deploy_manifests import one

from balancer.app.capacity_run import profiles_from_dict
from balancer.telemetry import slo_rules

OVERLAY = "overlays/capacity"


def test_the_capacity_overlay_records_the_slo_rates_of_its_own_services(tmp_path):
    services = one(OVERLAY, "ConfigMap", "gputide-services")["data"]["services.yaml"]
    profiles = profiles_from_dict(yaml.safe_load(services), "services.yaml").values()
    expected = slo_rules.rule_groups(slo_rules.choose_buckets([(p.name, p.slo_latency_s) for p in profiles],
                                                              slo_rules.VLLM_E2E_BUCKETS))
    rule = one(OVERLAY, "PrometheusRule", "gputide-slo-rules")
    assert rule["metadata"]["namespace"] == "gputide"
    assert rule["spec"]["groups"] == expected   # the rules `gputide slo-rules` writes for these very profiles
    recorded = {r["record"] for g in rule["spec"]["groups"] for r in g["rules"] if "record" in r}
    assert {"service:vllm_requests:rate1h", "service:vllm_slo_violations:rate5m"} <= recorded   # what gputide-slo reads
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"] if "alert" in r}
    assert sorted(alerts) == ["InferenceSloBurnRate1d", "InferenceSloBurnRate3d", "InferenceSloBurnRateFast",
                              "InferenceSloBurnRateSlow"]   # pages and tickets, against the p99 target's 1% budget
    assert all("(the SLO is a p99 latency target)" in a["annotations"]["description"] for a in alerts.values())
    promtool = shutil.which("promtool")
    if promtool:
        (tmp_path / "slo.yaml").write_text(yaml.safe_dump({"groups": rule["spec"]["groups"]}))
        subprocess.run([promtool, "check", "rules", str(tmp_path / "slo.yaml")], check=True, capture_output=True,
                       timeout=60)
