"""A demand that is stalled or partial is unknown, and the snapshot says which and why (audit a2).

rules/serving/vllm.yaml summed vLLM's finished rate and queue growth over whatever pods were scraped: a hung vLLM
(200 requests waiting, counters flat) read demand 0, and a Deployment with half its pods unscraped read half, so the
capacity planner lent the service's GPUs to training. The rules now record the demand NaN there (promtool:
rules/tests/gputide-serving-demand-unknown_test.yaml) with two counts beside it, `gputide_inference_pods_stalled`
and `gputide_inference_pods_reporting`; the source reads them with the ready replicas and names why the demand is
unknown in `ClusterSnapshot.demand_unknown`. Before, it refused the reading (`MissingTelemetry`) and the whole loop
held still, thermal relief included; now the service is left out of `services` (never read as 0), the others are
read, and only capacity shifting holds (tests/loop/test_loop_demand_unknown.py).
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
import yaml
from prometheus_client import CollectorRegistry

from balancer.actuate.base import ActionResult, Outcome
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.telemetry.serving import SERVING_SERIES, UNTOLD, read_services
from tests.telemetry.test_telemetry_prometheus_unit import NOW, FakeClient, source

ROOT = Path(__file__).resolve().parents[2]
STALLED = {"gputide_inference_demand_rps": "NaN", "gputide_inference_replicas": "4",
           "gputide_inference_replicas_ready": "4", "gputide_inference_pods_reporting": "4",
           "gputide_inference_pods_stalled": "1"}
PARTIAL = {"gputide_inference_demand_rps": "NaN", "gputide_inference_replicas": "4",
           "gputide_inference_replicas_ready": "4", "gputide_inference_pods_reporting": "2",
           "gputide_inference_pods_stalled": "0"}


def _rows(series: dict[str, str], service: str = "chat") -> list[dict]:
    return [{"metric": {"__name__": k, "service": service}, "value": [0, v]} for k, v in series.items()]


@pytest.mark.parametrize(("series", "why"), [
    (STALLED, "stalled: 1 pod(s) with requests in hand and no progress (tokens, finished requests, "
              "prompts read) over the window"),
    (PARTIAL, "2 of 4 ready pods reporting vLLM metrics"),
    ({**STALLED, "gputide_inference_pods_reporting": "3"},
     "stalled: 1 pod(s) with requests in hand and no progress (tokens, finished requests, prompts read) "
     "over the window; 3 of 4 ready pods reporting vLLM metrics"),
], ids=["stalled", "partial", "both"])
def test_an_unknown_demand_names_why_and_the_other_services_are_read(series, why):
    statuses, unknown = read_services(_rows(series) + _rows({"gputide_inference_demand_rps": "7"}, "embed"),
                                      (), {}, 0.5)
    assert unknown == {"chat": why}
    assert set(statuses) == {"embed"} and statuses["embed"].demand_rps == 7.0   # chat never read as 0


def test_a_nan_demand_with_no_count_to_tell_why_says_its_series_is_absent_or_nan():
    rows = _rows({"gputide_inference_demand_rps": "NaN", "gputide_inference_replicas": "3",
                  "gputide_inference_pods_reporting": "5", "gputide_inference_replicas_ready": "3"})
    assert read_services(rows, (), {}, 0.5) == ({}, {"chat": UNTOLD})
    assert "gputide_inference_demand_rps absent or NaN" in UNTOLD
    assert read_services(_rows({"gputide_inference_replicas": "3"}), (), {}, 0.5) == ({}, {"chat": UNTOLD})


@pytest.mark.parametrize("counts", [
    {"gputide_inference_pods_reporting": "5", "gputide_inference_replicas_ready": "4"},   # a rollout's surge pod
    {"gputide_inference_pods_reporting": "0", "gputide_inference_replicas_ready": "0"},   # scaled to zero
    {"gputide_inference_pods_stalled": "0"},
    {},                                                                                    # the sim's exporter
], ids=["surge", "scaled-to-zero", "none-stalled", "no-counts"])
def test_a_finite_demand_reads_as_before_whatever_counts_come_with_it(counts):
    st = read_services(_rows({"gputide_inference_demand_rps": "12", "gputide_inference_replicas": "4", **counts}),
                       (), {}, 0.5)[0]["chat"]
    assert (st.demand_rps, st.replicas, st.replicas_from_spec) == (12.0, 4, True)


def test_the_counts_the_source_reads_are_what_the_serving_rules_record():
    """Both ends of the contract: every series the source reads, but the simulated fleet's own, is recorded."""
    doc = yaml.safe_load((ROOT / "rules" / "serving" / "vllm.yaml").read_text())
    records = {r.get("record") for g in doc["groups"] for r in g["rules"]}
    assert set(SERVING_SERIES) <= records
    assert {"gputide_inference_pods_reporting", "gputide_inference_pods_stalled"} <= set(SERVING_SERIES)


class Spy:
    name = "spy"

    def __init__(self) -> None:
        self.calls: list = []

    def apply(self, action, snapshot):
        self.calls.append(action)
        return ActionResult(action, Outcome.APPLIED)


@pytest.mark.parametrize(("serving", "why"), [(STALLED, "stalled: 1 pod(s)"), (PARTIAL, "2 of 4 ready pods")],
                         ids=["stalled", "partial"])
def test_through_the_source_the_snapshot_names_it_and_the_loop_goes_on_saying_why(serving, why, caplog):
    snap = source(FakeClient(serving=serving)).snapshot()   # before: MissingTelemetry
    assert "chat" not in snap.services and why in snap.demand_unknown["chat"]
    reg = CollectorRegistry()
    rec = Reconciler(source=source(FakeClient(serving=serving)), actuator=Spy(), clock=lambda: NOW,
                     metrics=ControllerMetrics(reg))
    with caplog.at_level(logging.WARNING, logger="balancer.loop"):
        report = rec.run_once()
    assert report.status == "ok", report.reason
    assert reg.get_sample_value("gputide_fail_static") == 0
    assert any("inference demand unknown for chat" in r.getMessage() and why in r.getMessage()
               for r in caplog.records)
