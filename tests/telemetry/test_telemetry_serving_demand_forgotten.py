"""A service whose demand stays unknown holds the controller for `forget_vanished_after_s`, then is left out.

A stalled or unscraped service's NaN demand (rules/serving/vllm.yaml) refused every reading (`MissingTelemetry`): one
such service held the whole fleet, thermal relief and every other service's scaling included, for as long as it
stayed so, where a vanished GPU is forgotten after `forget_vanished_after_s` (600 s) precisely so one dark node
cannot stop the fleet for good (audit a5). The source now holds for it as long, then leaves it out of the statuses
(unplanned, as a shard leaves the services it is not concerned with), logging it once (`serving.UnknownDemands`).
"""

from __future__ import annotations

import logging

import pytest
from prometheus_client import CollectorRegistry

from balancer.errors import MissingTelemetry
from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from tests.telemetry.test_telemetry_prometheus_unit import NOW, FakeClient
from tests.telemetry.test_telemetry_serving_demand_unknown import STALLED, Spy

SEARCH = {"gputide_inference_demand_rps": "3", "gputide_inference_replicas": "2"}


def _serving(chat: dict[str, str]) -> list[tuple[dict[str, str], str]]:
    """`chat` with the given series, and `search`, whose demand is known throughout."""
    return ([({"__name__": k, "service": "chat"}, v) for k, v in chat.items()]
            + [({"__name__": k, "service": "search"}, v) for k, v in SEARCH.items()])


def _source(client: FakeClient, clock: list[float]) -> PrometheusTelemetrySource:
    return PrometheusTelemetrySource(PrometheusOptions(url="http://prom.invalid", scrape_interval_s=15),
                                     client=client, clock=lambda: clock[0])


def test_an_unknown_demand_holds_for_a_while_then_the_service_is_left_out_logged_once(caplog):
    clock = [NOW]
    src = _source(FakeClient(serving=_serving(STALLED)), clock)
    for step in (0, 300, 599):
        clock[0] = NOW + step
        with pytest.raises(MissingTelemetry, match="stalled") as err:
            src.snapshot()
        assert err.value.subjects == ("chat",)
    with caplog.at_level(logging.WARNING, logger="balancer.telemetry.prometheus"):
        for step in (600, 660, 900):
            clock[0] = NOW + step
            services = src.snapshot().services
            assert set(services) == {"search"} and services["search"].demand_rps == 3.0
    said = [r.getMessage() for r in caplog.records if "leaving service chat out" in r.getMessage()]
    assert len(said) == 1 and "unknown for 600s" in said[0]


def test_a_demand_known_again_starts_the_wait_afresh():
    clock = [NOW]
    client = FakeClient(serving=_serving(STALLED))
    src = _source(client, clock)
    with pytest.raises(MissingTelemetry):
        src.snapshot()
    clock[0] = NOW + 300
    client.serving = _serving({"gputide_inference_demand_rps": "12", "gputide_inference_replicas": "4"})
    assert src.snapshot().services["chat"].demand_rps == 12.0
    client.serving = _serving(STALLED)
    for step in (400, 700, 999):   # unknown again from NOW + 400: held until NOW + 1000, not NOW + 600
        clock[0] = NOW + step
        with pytest.raises(MissingTelemetry):
            src.snapshot()
    clock[0] = NOW + 1000
    assert "chat" not in src.snapshot().services
    client.serving = _serving({"gputide_inference_demand_rps": "12", "gputide_inference_replicas": "4"})
    clock[0] = NOW + 1100
    assert src.snapshot().services["chat"].demand_rps == 12.0   # back in the plan with its demand
    client.serving = _serving(STALLED)
    clock[0] = NOW + 1200
    with pytest.raises(MissingTelemetry):   # and held for afresh, not left out at once
        src.snapshot()


def test_the_loop_holds_still_for_the_wait_then_runs_without_the_service():
    clock = [NOW]
    reg = CollectorRegistry()
    rec = Reconciler(source=_source(FakeClient(serving=_serving(STALLED)), clock), actuator=Spy(),
                     clock=lambda: clock[0], metrics=ControllerMetrics(reg))
    report = rec.run_once()
    assert (report.status, report.reason) == ("fail_static", "missing_telemetry")
    clock[0] = NOW + 600
    report = rec.run_once()
    assert report.status == "ok", report.reason
