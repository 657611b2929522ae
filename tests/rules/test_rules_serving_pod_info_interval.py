"""`gputide:pod_deployment:info` is recorded every minute, in a group of its own: its inputs are kube-state-metrics'
(scraped each minute) and the generated SLO rules read it with max_over_time over a day or three, so the 15 s of
the other serving rules only made 4x its samples (audit a10)."""

from __future__ import annotations

from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]


def _interval_of(doc: dict, record: str) -> str:
    return next(g.get("interval", "") for g in doc["groups"] if record in {r.get("record") for r in g["rules"]})


def test_pod_deployment_info_is_recorded_every_minute():
    doc = yaml.safe_load((ROOT / "rules" / "serving" / "vllm.yaml").read_text())
    assert _interval_of(doc, "gputide:pod_deployment:info") == "1m"
    assert _interval_of(doc, "gputide_inference_replicas") == "15s"


def test_the_shipped_prometheusrule_records_it_every_minute_too():
    shipped = yaml.safe_load((ROOT / "deploy" / "components" / "capacity" / "generated" / "serving-rules.yaml")
                             .read_text())
    assert _interval_of(shipped["spec"], "gputide:pod_deployment:info") == "1m"
