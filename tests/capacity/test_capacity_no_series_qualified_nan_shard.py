"""A profiled service whose series are all read under namespace-qualified names, each with no finite demand (NaN:
`demand_unknown` keys `old/chat`, `prod/chat`), is held in a shard with the QUALIFIED note, as in the fleet. Before,
a shard's snapshot dropped a qualified NaN key (its owner, the pods', is the bare name: `shard.restrict`, and the
Prometheus source's `_running` for a scoped read), so `no_series_why` found no series of the name there and said
NO_SERIES: the operator was sent to a scrape that works."""

from __future__ import annotations

import numpy as np

from balancer.plan.capacity_loop import NO_SERIES, with_unseen
from balancer.telemetry.prometheus import _running
from balancer.telemetry.serving import read_services
from balancer.telemetry.shard import ShardSelector, restrict
from tests.loop.test_capacity_hold_no_series import PROFILED, idle_two
from tests.loop.test_loop_demand_unknown import WHY

N0 = ShardSelector("a", nodes=frozenset({"n0"}))   # chat's replica's node


def test_a_shard_gives_the_qualified_note_where_every_qualified_series_is_nan():
    fleet = idle_two().replace(services={}, demand_unknown={"old/chat": WHY, "prod/chat": WHY})
    part = restrict(fleet, N0)[0]
    assert dict(part.demand_unknown) == {"old/chat": WHY, "prod/chat": WHY}
    for snap in (fleet, part):
        why = with_unseen(snap, PROFILED).demand_unknown["chat"]
        assert "(old/chat, prod/chat among them)" in why and why != NO_SERIES, why
    # a shard without chat's replica names neither (nor holds for chat)
    assert not restrict(fleet, ShardSelector("b", nodes=frozenset({"n1"})))[0].demand_unknown


def test_a_scoped_prometheus_read_keeps_the_qualified_nan_series_of_a_service_running_in_scope():
    snap = idle_two()
    rows = [{"metric": {"__name__": "gputide_inference_replicas", "service": "chat", "namespace": ns},
             "value": [0, "1"]} for ns in ("old", "prod")]
    here = np.array([g.node == "n0" for g in snap.gpus])
    services, unknown = read_services(rows, snap.workloads, {}, 1.0,
                                      _running(snap.workloads, snap.placements, here))
    assert services == {} and sorted(unknown) == ["old/chat", "prod/chat"]
    elsewhere = _running(snap.workloads, snap.placements, ~here)
    assert read_services(rows, snap.workloads, {}, 1.0, elsewhere) == ({}, {})
