"""The serving rules run every 15 s (rules/serving/vllm.yaml's group, and the PrometheusRule the capacity component
ships from it). The controller takes a `gputide_inference_replicas` reading `safety.maxTelemetryAgeS` after a cap
was met as sampled after it (`CapBelief.raised_by`), but a recorded spec.replicas is as old as the HPA's sync, a
kube-state-metrics scrape and the group's evaluation together: at Prometheus's default 1 m (the group set none)
that was up to 135 s, beyond the 120 s, so a spec.replicas from before maxReplicas was lowered could end a belief
just learned (audit a3)."""

from __future__ import annotations

from pathlib import Path

import yaml

from balancer.config import BalancerPolicy
from balancer.telemetry.promserver import parse_duration

ROOT = Path(__file__).resolve().parents[2]
HPA_SYNC_S = 15.0          # kube-controller-manager's --horizontal-pod-autoscaler-sync-period default
KSM_SCRAPE_S = 60.0        # kube-state-metrics scraped at Prometheus's default interval (a minute) or more often


def _group(doc: dict) -> dict:
    return next(g for g in doc["groups"] if g["name"] == "gputide-serving-vllm")


def test_a_recorded_spec_replicas_is_never_older_than_the_controller_takes_it_to_be():
    group = _group(yaml.safe_load((ROOT / "rules" / "serving" / "vllm.yaml").read_text()))
    assert "gputide_inference_replicas" in {r.get("record") for r in group["rules"]}
    lag = HPA_SYNC_S + KSM_SCRAPE_S + parse_duration(group.get("interval", "1m"))
    assert lag <= BalancerPolicy().safety.max_telemetry_age_s
    assert group["interval"] == "15s"


def test_the_shipped_prometheusrule_keeps_the_interval():
    shipped = yaml.safe_load((ROOT / "deploy" / "components" / "capacity" / "generated" / "serving-rules.yaml")
                             .read_text())
    assert _group(shipped["spec"])["interval"] == "15s"
