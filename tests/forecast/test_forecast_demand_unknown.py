"""A cycle whose snapshot names a service's demand unknown (`ClusterSnapshot.demand_unknown`: a stalled vLLM pod) is
a gap in that service's history: nothing fed (never a 0, which would teach the model an idle hour), no forecast, and
the service still seen, so a demand unknown longer than `forget_after_s` does not forget its history and model as if
it were deleted."""

from __future__ import annotations

from balancer.forecast.service import ServiceForecaster
from balancer.model import ServiceStatus
from tests.loop.loop_helpers import make_fleet, snapshot

FL = make_fleet(1, 1)
DAY = 86400.0


class Online:
    step_s = 300.0

    def __init__(self) -> None:
        self.fed: list[tuple[str, float, float]] = []
        self.forgotten: list[str] = []

    def update(self, name, now, value):
        self.fed.append((name, now, value))

    def forecast(self, name, now, steps):
        raise ValueError("too little history")

    def forget(self, name):
        self.forgotten.append(name)


def test_an_unknown_demand_is_a_gap_never_fed_and_the_service_stays_seen():
    online = Online()
    fc = ServiceForecaster(online, 3600.0, forget_after_s=DAY)
    chat = {"chat": ServiceStatus(name="chat", demand_rps=40.0, p99_latency_s=0.1, slo_latency_s=1.0, replicas=1)}
    fc(snapshot(FL, services=chat, time=0.0))
    for t in (0.6 * DAY, 1.2 * DAY, 1.8 * DAY):   # unknown for longer than forget_after_s
        assert fc(snapshot(FL, time=t).replace(demand_unknown={"chat": "stalled"})) == {}
    assert online.fed == [("chat", 0.0, 40.0)]   # the gap is not fed, not as 0 either
    assert online.forgotten == [] and fc.seen["chat"] == 1.8 * DAY
