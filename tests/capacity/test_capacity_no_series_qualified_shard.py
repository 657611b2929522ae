"""The note of a profiled service whose series are all read under namespace-qualified names (`no_series_why`) names
those its snapshot shows, and claims no count of them: a shard's snapshot (`shard.restrict`) keeps a qualified status
and drops a qualified NaN key, so in a shard the note said "its name's series carry two namespaces, so each is read
as namespace/service (old/chat)", one name where the fleet had two."""

from __future__ import annotations

from balancer.plan.capacity_loop import with_unseen
from balancer.telemetry.shard import ShardSelector, restrict
from tests.loop.test_capacity_hold_no_series import PROFILED, idle_two
from tests.loop.test_loop_demand_unknown import WHY


def test_the_qualified_note_is_true_in_a_shard_that_sees_one_of_the_names():
    snap = idle_two()
    status = next(iter(snap.services.values()))
    fleet = snap.replace(services={"old/chat": status}, demand_unknown={"prod/chat": WHY})
    part = restrict(fleet, ShardSelector("a", nodes=frozenset({"n0"})))[0]
    assert list(part.services) == ["old/chat"] and list(part.demand_unknown) == ["prod/chat"]
    whole, shard = (with_unseen(s, PROFILED).demand_unknown["chat"] for s in (fleet, part))
    assert "(old/chat, prod/chat among them)" in whole, whole
    assert "(old/chat, prod/chat among them)" in shard, shard
    for why in (whole, shard):
        assert "more than one namespace" in why and "two namespaces" not in why, why
