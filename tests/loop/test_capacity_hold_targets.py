"""A capacity hold decides no target, so the services' targets go: `gputide_capacity_target_gpus{service}` absent
while it holds, set again by the next cycle that plans. Before, the last planned cycle's target stayed for as long as
the hold lasted (half an hour here), read as the forecast's current ask. The loans made stand meanwhile (nothing
lends nor reclaims), so the loaned count stays."""

from __future__ import annotations

import json
from functools import partial
from pathlib import Path

from prometheus_client import CollectorRegistry

from balancer.loop import Reconciler
from balancer.metrics import ControllerMetrics
from balancer.plan.capacity import CapacityPolicy
from balancer.plan.capacity_loop import plan_with_capacity
from tests.capacity.test_capacity_clash import ON, PROFILES
from tests.loop.test_loop_demand_unknown import Fleet


def test_the_targets_go_while_capacity_holds_and_come_back_when_it_plans():
    clock = [1000.0]
    fleet, reg = Fleet(clock), CollectorRegistry()
    fleet.unknown, fleet.hot = False, False
    planner = partial(plan_with_capacity, profiles={"chat": PROFILES["chat"]}, capacity_policy=CapacityPolicy())
    rec = Reconciler(source=fleet, actuator=fleet, policy=ON, clock=lambda: clock[0], planner=planner,
                     metrics=ControllerMetrics(reg))

    def target():
        return reg.get_sample_value("gputide_capacity_target_gpus", {"service": "chat"})

    rec.run_once()
    assert target() is not None
    loaned = reg.get_sample_value("gputide_capacity_gpus", {"class": "loaned"})
    fleet.unknown = True
    for k in range(1, 30):   # half an hour of unknown demand
        clock[0] = 1000.0 + 60.0 * k
        rec.run_once()
        assert target() is None, k
    assert reg.get_sample_value("gputide_capacity_gpus", {"class": "loaned"}) == loaned
    fleet.unknown = False
    clock[0] += 60.0
    rec.run_once()
    assert target() is not None


def test_where_operators_read_the_targets_they_are_told_a_hold_gaps_them():
    """The runbook sent operators to gputide_capacity_target_gpus, and the dashboard drew it, with no word that a hold
    leaves it absent: a gap read as a scrape failure, or a target of none."""
    root = Path(__file__).resolve().parents[2]
    paragraphs = (root / "docs" / "runbooks.md").read_text().split("\n\n")
    assert all("gputide_capacity_holding" in p for p in paragraphs if "gputide_capacity_target_gpus" in p)
    panels = json.loads((root / "dashboards" / "tidal-capacity.json").read_text())["panels"]
    drawn = [p for p in panels
             if any("gputide_capacity_target_gpus" in t.get("expr", "") for t in p.get("targets", []))]
    assert drawn and all("gputide_capacity_holding" in p["description"] for p in drawn)
