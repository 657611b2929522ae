"""The Balancer dashboard shows what an operator needs when the controller or the scheduler stops doing something
on its own: GPUs the controller forgot, safety-ledger saves failing (no evictions meanwhile) and preemption holds
stuck past the hour (docs/metrics.md, section 3).

Two controller replicas (ctl-0 leads, ctl-1 is a standby) and two scheduler replicas (sch-0 leads; sch-1, demoted,
still serves the 1 it read while it led). The forgotten GPUs read 0, not No data, while a replica leads and has
forgotten none, and No data while no replica is scraped at all (unknown, not "none forgotten").
"""

from __future__ import annotations

import pytest
from panel_eval import check, panel_query, run

BOARD = "balancer.json"
FORGOTTEN = (BOARD, "GPUs forgotten", "forgotten")
LEDGER = (BOARD, "Safety ledger saves failing", "{{reason}}")
DROPPED = (BOARD, "Safety ledger saves failing", "entries dropped")
STUCK = (BOARD, "Preemption holds stuck", "stuck")
CTL = 'cluster="c1", job="gputide-controller"'
SCH = 'cluster="c1", job="gputide-scheduler"'


def _controllers(forgotten: dict[str, int]) -> list[dict]:
    out = [{"series": f'gputide_leader{{{CTL}, instance="ctl-{i}:9836", lease="gputide-controller"}}',
            "values": f"{leading}x20"} for i, leading in ((0, 1), (1, 0))]
    out += [{"series": f'gputide_gpus_forgotten{{{CTL}, instance="ctl-0:9836", node="{node}"}}', "values": f"{n}x20"}
            for node, n in forgotten.items()]
    # the leader's saves fail with 409 once a scrape (4 a minute) and cut 2 entries a scrape; the standby saves none
    out += [{"series": f'gputide_ledger_write_failures_total{{{CTL}, instance="ctl-{i}:9836", reason="{r}"}}',
             "values": f"0+{1 if (i, r) == (0, 'conflict') else 0}x20"}
            for i in (0, 1) for r in ("conflict", "refused")]
    out += [{"series": f'gputide_ledger_entries_dropped_total{{{CTL}, instance="ctl-{i}:9836"}}',
             "values": f"0+{2 if i == 0 else 0}x20"} for i in (0, 1)]
    return out


def _schedulers() -> list[dict]:
    out = []
    for i, (leading, stuck) in enumerate(((1, 2), (0, 1))):
        labels = f'{SCH}, instance="sch-{i}:9837"'
        out += [{"series": f"gputide_scheduler_leader{{{labels}}}", "values": f"{leading}x20"},
                {"series": f"gputide_scheduler_holds_stuck{{{labels}}}", "values": f"{stuck}x20"}]
    return out


@pytest.mark.integration
def test_forgotten_gpus_ledger_failures_and_stuck_holds_of_the_leaders(promtool, tmp_path):
    check(promtool, tmp_path, _controllers({"node-a": 2, "node-b": 1}) + _schedulers(),
          {FORGOTTEN: 3, STUCK: 2, DROPPED: 8}, interval="15s", eval_time="4m")


@pytest.mark.integration
def test_ledger_failures_per_minute_by_reason(promtool, tmp_path):
    run(promtool, tmp_path, _controllers({}), [{"expr": panel_query(*LEDGER), "eval_time": "4m", "exp_samples": [
        {"labels": '{reason="conflict"}', "value": 4}, {"labels": '{reason="refused"}', "value": 0}]}], interval="15s")


@pytest.mark.integration
@pytest.mark.parametrize(("series", "expected"), [
    (_controllers({}), 0),
    ([], None),
], ids=["a leader that forgot none: 0", "no controller scraped: No data"])
def test_forgotten_gpus_read_zero_under_a_leader_and_no_data_without_one(promtool, tmp_path, series, expected):
    check(promtool, tmp_path, series or [{"series": "up", "values": "1x20"}], {FORGOTTEN: expected},
          interval="15s", eval_time="4m")
