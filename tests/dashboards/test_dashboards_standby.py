"""The controller dashboard shows the acting replica's eviction budget and telemetry staleness, not a standby's.

A replica that lost its Lease stops reconciling, and its gputide_eviction_budget_remaining and
gputide_telemetry_staleness_seconds stay at what they read when it last acted (the alerts skip it:
`unless on (cluster, job, instance) (gputide_leader == 0)`). Here the leader has 40 evictions left and 20 s old
telemetry; the standby, demoted with an empty budget during a telemetry outage, still reads 0 and 900 s. A
controller without leader election has no gputide_leader and is shown.
"""

from __future__ import annotations

import pytest
from panel_eval import check, colour, panel

# (dashboard, panel title, target legend) -> the leader's value
TRUTH = {("balancer.json", "Eviction budget left", "budget"): 40,
         ("balancer.json", "Telemetry staleness", "staleness"): 20,
         ("balancer.json", "Fail-static and staleness", "staleness"): 20}


def _series(replicas: dict[str, tuple[int | None, int, int]]) -> list[dict]:
    out = []
    for instance, (leader, budget, staleness) in replicas.items():
        labels = f'cluster="c1", job="gputide-controller", instance="{instance}"'
        if leader is not None:
            out.append({"series": f'gputide_leader{{{labels}, lease="gputide-controller"}}', "values": f"{leader}x10"})
        out.append({"series": f"gputide_eviction_budget_remaining{{{labels}}}", "values": f"{budget}x10"})
        out.append({"series": f"gputide_telemetry_staleness_seconds{{{labels}}}", "values": f"{staleness}x10"})
    return out


@pytest.mark.parametrize("replicas", [
    {"ctl-0:9836": (1, 40, 20), "ctl-1:9836": (0, 0, 900)},
    {"ctl-0:9836": (None, 40, 20)},
], ids=["leader and demoted standby", "no leader election"])
@pytest.mark.integration
def test_a_standbys_frozen_budget_and_staleness_are_not_shown(promtool, tmp_path, replicas):
    check(promtool, tmp_path, _series(replicas), TRUTH)


def test_staleness_is_red_where_the_controller_holds_still():
    """The stat turned red at 180 s, but past the default spec.safety.maxTelemetryAgeS (120 s; --stale-after can only
    be shorter) the controller already holds still and GpuTelemetryStale fires: from 120 to 180 s it read orange."""
    from balancer.config import SafetyPolicy

    most = SafetyPolicy().max_telemetry_age_s
    staleness = panel("balancer.json", "Telemetry staleness")
    assert colour(staleness, most) == "red"
    assert colour(staleness, most - 1) != "red"
