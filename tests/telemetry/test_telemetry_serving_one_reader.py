"""The serving series have one reader, `serving.read_services`: the statuses of a known demand and the services
whose demand is unknown, together. `service_status`, a wrapper keeping the statuses alone, was called by tests only;
a caller taking it would drop the unknown demands (the capacity hold's input) without a word."""

from __future__ import annotations

from balancer.telemetry import serving


def test_read_services_is_the_only_reader():
    assert not hasattr(serving, "service_status")
    rows = [{"metric": {"__name__": "gputide_inference_demand_rps", "service": "chat"}, "value": [0, "NaN"]},
            {"metric": {"__name__": "gputide_inference_demand_rps", "service": "embed"}, "value": [0, "3"]}]
    statuses, unknown = serving.read_services(rows, (), {}, 0.5)
    assert (sorted(statuses), sorted(unknown)) == (["embed"], ["chat"])
