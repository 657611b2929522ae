"""A dark exporter is a gap on the utilisation dashboard, not an idle fleet.

Two GPUs, one held by a training pod, published with their join table by one exporter that fails its scrape at 2m
(stale marker) and answers again from 2m45s (the total, one group behind, from 3m). A real Prometheus runs each rule
group on its own clock; promtool's group_eval_order runs the attribution group, then the aggregates, then the
normalisation at every step, as happened in the demo: at the outage's first evaluation the join table is gone while
cluster:gpu_count:sum (and gpu:temperature:celsius) still hold both GPUs. The panels once read "0 allocated" there
(`or 0 * <total>`) and the idle class every GPU; each must read No data instead, and the true counts either side of the
outage.
"""

from __future__ import annotations

import pytest
from panel_eval import ROOT, check

RULES = ROOT / "rules" / "gputide-recording.yaml"
ORDER = ["gputide-attribution", "gputide-gpu-aggregate", "gputide-gpu-normalise", "gputide-slo"]
BOARD = "fragmentation-utilisation.json"
COUNTS = "Allocated vs used vs idle GPUs"
SHARE = (BOARD, "Allocated share", "allocated")
ALLOCATED = (BOARD, COUNTS, "allocated")
IDLE = (BOARD, COUNTS, "idle")
BY_CLASS = (BOARD, "GPUs by workload class", "{{workload_class}}")


def _dark_from_2m(series: str, value: float) -> dict:
    """`series` reading `value`, but for the exporter's failed scrape at 2m (stale) until 2m45s."""
    return {"series": series, "values": f"{value}x7 stale _x2 {value}x8"}


def _gpu(metric: str, slot: int, value: float) -> dict:
    labels = 'cluster="c1",job="gputide-exporter",Hostname="node-x",modelName="NVIDIA H100 80GB HBM3"'
    return _dark_from_2m(f'{metric}{{{labels},gpu="{slot}",UUID="GPU-x{slot}"}}', value)


def _series() -> list[dict]:
    return [_gpu("DCGM_FI_DEV_GPU_TEMP", 0, 60), _gpu("DCGM_FI_DEV_GPU_TEMP", 1, 40),
            _dark_from_2m('gputide_gpu_workload_info{cluster="c1",job="gputide-exporter",UUID="GPU-x0",namespace="ml",'
                          'pod="t0",workload_class="training"}', 1)]


@pytest.mark.integration
@pytest.mark.parametrize(("eval_time", "expected"), [
    ("1m", {SHARE: 0.5, ALLOCATED: 1, IDLE: 1}),
    ("2m", {SHARE: None, ALLOCATED: None, IDLE: None, BY_CLASS: None}),
    ("3m", {SHARE: 0.5, ALLOCATED: 1, IDLE: 1}),
], ids=["before: 1 of 2 allocated", "the dark exporter's first evaluation: No data", "back: 1 of 2 again"])
def test_a_dark_exporter_reads_no_data_not_an_idle_fleet(promtool, tmp_path, eval_time, expected):
    check(promtool, tmp_path, _series(), expected, rules=RULES, interval="15s", eval_time=eval_time,
          group_eval_order=ORDER)


FLEET = "gpu-fleet.json"
ANY_XID = (FLEET, "GPUs with an XID error", "any XID")
FATAL_XID = (FLEET, "GPUs with an XID error", "fatal XID")


def _xid_series() -> list[dict]:
    """GPU-x0's last XID is 13 (an application fault, not fatal), GPU-x1 has none."""
    return [_gpu("DCGM_FI_DEV_XID_ERRORS", 0, 13), _gpu("DCGM_FI_DEV_XID_ERRORS", 1, 0)]


@pytest.mark.integration
@pytest.mark.parametrize(("eval_time", "expected"), [
    ("1m", {ANY_XID: 1, FATAL_XID: 0}),
    ("2m15s", {ANY_XID: None, FATAL_XID: None}),
    ("3m", {ANY_XID: 1, FATAL_XID: 0}),
], ids=["before: 1 GPU with an XID, none fatal", "dark: No data, not 'no XID errors'", "back: 1 again"])
def test_a_dark_exporter_reads_no_data_not_a_fleet_without_xid_errors(promtool, tmp_path, eval_time, expected):
    """The XID stat fell back with `or vector(0)`: a dark exporter read 0 GPUs with an XID error, in green."""
    check(promtool, tmp_path, _xid_series(), expected, rules=RULES, interval="15s", eval_time=eval_time)
