"""A snapshot's `spread_services` (a shard's: the services with a status in the fleet's it leaves out) is frozen as
its other fields are: `snapshot.replace(spread_services={...})` kept the caller's set, so whoever held that set (or
shared it between snapshots) changed what a snapshot said after it was taken."""

from __future__ import annotations

import pytest

from tests.loop.loop_helpers import make_fleet, snapshot, workload


def test_spread_services_given_as_a_set_is_frozen_and_not_shared():
    base = snapshot(make_fleet(1, 2), workloads=[(workload("chat-0"), (0,))])
    given = {"chat"}
    snap = base.replace(spread_services=given)
    given.add("embed")
    assert snap.spread_services == {"chat"} and isinstance(snap.spread_services, frozenset)
    with pytest.raises(AttributeError):
        snap.spread_services.add("code")   # type: ignore[attr-defined]
    again = snap.replace(time=snap.time + 1.0)
    assert again.spread_services == {"chat"} and isinstance(again.spread_services, frozenset)
