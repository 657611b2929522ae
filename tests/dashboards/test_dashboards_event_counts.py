"""An event the controller or the scheduler counted once reads as one event on the Balancer dashboard.

Each counter below steps by 1 at 5m (scraped every 15 s). Grafana draws a 6 h range at a 20 s step, so
`$__rate_interval` is 60 s (four scrapes): `increase(...[$__rate_interval])` per bar counted the event in every bar
whose window held it, and the bar chart of one migration added up to three. Read as the
panel's unit says (a count per bar: the bars' sum; a rate per minute: its integral over the steps), the hour around
the event must hold one event.
"""

from __future__ import annotations

import json

import pytest
from panel_eval import ALL, ROOT, run

from balancer.dashboards_render import interpolate

STEP_S = 20   # Grafana's step for a 6 h range on a panel about 1000 px wide
BOARD = "balancer.json"
# panel title -> the counter series that steps once
COUNTERS = {
    "Actions by type and reason": 'gputide_actions_total{cluster="c",type="migrate",reason="hotspot"}',
    "Rejections by limit": 'gputide_actions_rejected_total{cluster="c",reason="cooldown"}',
    "Failed scheduling passes": 'gputide_scheduler_failed_passes_total{cluster="c",pod="s-0",instance="i:9837"}',
    "Preempted pods": 'gputide_scheduler_preempted_pods_total{cluster="c",pod="s-0",instance="i:9837"}',
}
# how much of one event a point of each unit stands for: a count is itself, a per-minute rate covers a step
PER_POINT = {"none": 1, "short": 1, "opm": STEP_S / 60, "ops": STEP_S}


def _panel(title: str) -> dict:
    (panel,) = [p for p in json.loads((ROOT / "dashboards" / BOARD).read_text())["panels"] if p.get("title") == title]
    return panel


@pytest.mark.integration
@pytest.mark.parametrize("title", sorted(COUNTERS))
def test_one_counted_event_reads_as_one_event(promtool, tmp_path, title):
    panel = _panel(title)
    (target,) = panel["targets"]
    expr = interpolate(target["expr"], ALL, step=STEP_S, range_s=6 * 3600)
    per_point = PER_POINT[panel["fieldConfig"]["defaults"]["unit"]]
    total = f"round(sum_over_time(sum({expr})[30m:{STEP_S}s]) * {per_point})"
    run(promtool, tmp_path, [{"series": COUNTERS[title], "values": "0x19 1x100"}],
        [{"expr": total, "eval_time": "20m", "exp_samples": [{"value": 1}]}], interval="15s")
