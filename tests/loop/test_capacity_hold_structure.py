"""`_holding` works out a hold once (`Hold`): its notes by reason, the profiled services whose demand is unknown
and whether pods are unattributed, which `_held_jobs` reads. Before, `_held_jobs` filtered the demand unknown again
and tested the notes' keys for the unattributed pods. The reasons are gputide_capacity_holding's label values."""

from __future__ import annotations

from balancer.plan.capacity_loop import HOLD_DEMAND_UNKNOWN, HOLD_UNATTRIBUTED, Hold, _holding
from tests.capacity.test_capacity_clash import PROFILES
from tests.loop.test_capacity_hold_both_reasons import both


def test_holding_names_the_held_services_and_the_blind_pods():
    snap = both()   # chat's demand unknown; embed reports a replica but owns no pod
    hold = _holding(snap.replace(demand_unknown={**snap.demand_unknown, "unprofiled": "stalled"}), PROFILES)
    assert isinstance(hold, Hold) and (hold.held_services, hold.blind) == ({"chat": snap.demand_unknown["chat"]}, True)
    assert sorted(hold.notes) == [HOLD_DEMAND_UNKNOWN, HOLD_UNATTRIBUTED] == ["inference_demand_unknown",
                                                                            "unattributed_pods"]
    assert not _holding(snap.replace(demand_unknown={}, workloads=()), PROFILES).notes
