"""The chargeback dashboard bills what each namespace held, evaluated by promtool on the shipped rules.

One day of telemetry for three GPUs, scraped and evaluated every 15 s: namespace `ml` holds GPU-a for one hour
(09:00-10:00, then its pod ends and its series goes stale), `serve` holds GPU-b all day, and `ci` and `nb` share
GPU-c (time-slicing, half each) for three hours. The committed dashboard's queries, with Grafana's variables
filled in as the PNG renderer fills them (cluster "All", `$__range` one day), are evaluated at the end of that
day: the per-day bars and the invoice tables over the selected range must come to the GPU-hours and kWh each
namespace held (before the fix, `ml` was billed 24 GPU-hours and 16.8 kWh).

Tolerance: promtool compares values exactly, so each query is wrapped in `round(..., 0.05)`, which equals the
truth when the bill is within 0.025 of it (1.5 GPU-minutes; 2-4 minutes of energy at these GPUs' 400-700 W).
What the method itself is off by, here: on Prometheus 2.x a subquery point exactly on the window's left edge is
counted too (`serve`: 1441 minutes, 24.017 GPU-h, 7.205 kWh). The holds that start and end inside the day are
billed exactly, to 0.001 (a second case): namespace:gpu_seconds:rate1m used to average its input over the last
minute, so it still read the GPUs a minute after the pod ended (`ml`: 61 GPU-minutes, 1.017 GPU-h).
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

from balancer.dashboards_render import interpolate

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "rules" / "gputide-recording.yaml"   # the chargeback rules; the alerts would only add run time
BILLED = ("namespace:gpu_seconds:rate1m", "namespace:gpu_energy:joules_rate1m")   # what the panels integrate
SCRAPES_PER_MIN = 4                  # a 15 s scrape and rule interval, as on a real cluster: promtool evaluates the
                                     # rule groups in a random order at each step, and with one-minute steps a
                                     # rate(...[1m]) over another group's output sees one sample or two by chance
DAY_MIN = 1440
START_MIN = 60                       # telemetry starts an hour before the billed day (rate() needs two samples)
END_MIN = START_MIN + DAY_MIN        # the billed day is (START_MIN, END_MIN]; queries are evaluated at its end
WATTS = {"GPU-a": 700, "GPU-b": 300, "GPU-c": 400}
# (namespace, pod, GPU, first minute held, minutes held)
HOLDS = [
    ("ml", "train-0", "GPU-a", START_MIN + 9 * 60, 60),
    ("serve", "vllm-0", "GPU-b", 0, END_MIN + 1),
    ("ci", "runner-0", "GPU-c", START_MIN + 13 * 60, 180),
    ("nb", "jupyter-0", "GPU-c", START_MIN + 13 * 60, 180),
]
# what each namespace held in the billed day: GPU-hours and kWh (a GPU shared by two pods counts half for each)
TRUTH = {
    "ml": (1.0, 0.7),
    "serve": (24.0, 7.2),
    "ci": (1.5, 0.6),
    "nb": (1.5, 0.6),
}
PANELS = {
    "GPU-hours per namespace per day": 0,
    "GPU-hours per namespace over the selected range": 0,
    "Energy per namespace per day": 1,
    "Energy per namespace over the selected range": 1,
}


def _gpu_series() -> list[dict]:
    out = []
    for uuid, watts in WATTS.items():
        labels = f'cluster="c",Hostname="n0",gpu="{uuid[-1]}",UUID="{uuid}",modelName="NVIDIA H200"'
        out.append({"series": f"DCGM_FI_DEV_GPU_TEMP{{{labels}}}", "values": f"40x{END_MIN * SCRAPES_PER_MIN}"})
        # dcgm-exporter's energy counter is in mJ: W x 15 s x 1000 per scrape
        out.append({"series": f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}}",
                    "values": f"0+{watts * 60 // SCRAPES_PER_MIN * 1000}x{END_MIN * SCRAPES_PER_MIN}"})
    return out


def _hold_series(namespace: str, pod: str, uuid: str, first: int, minutes: int) -> dict:
    """The join table's series for one pod: absent before minute `first`, 1 for `minutes`, then stale (the pod
    ended and the exporter stopped publishing it)."""
    held = f"1x{minutes * SCRAPES_PER_MIN - 1}"
    values = f"_x{first * SCRAPES_PER_MIN} {held}" if first else held
    if first + minutes <= END_MIN:
        values += " stale"
    labels = f'cluster="c",UUID="{uuid}",namespace="{namespace}",pod="{pod}",workload_class="training"'
    return {"series": f"gputide_gpu_workload_info{{{labels}}}", "values": values}


def panel_query(title: str) -> str:
    """The committed dashboard's query for `title`, with the variables Grafana would fill in for a one-day view."""
    dashboard = json.loads((ROOT / "dashboards" / "usage-chargeback.json").read_text())
    (panel,) = [p for p in dashboard["panels"] if p.get("title") == title]
    (target,) = panel["targets"]
    return interpolate(target["expr"], {"cluster": ".*"}, step=86400, range_s=DAY_MIN * 60)


def _case(title: str, unit: int, precision: float, namespaces: list[str]) -> dict:
    """One panel's query rounded to `precision`, checked for `namespaces` only (the others are dropped)."""
    others = " or ".join(f'label_replace(vector(1), "namespace", "{ns}", "", "")'
                         for ns in TRUTH if ns not in namespaces)
    expr = f"round({panel_query(title)}, {precision})" + (f" unless on (namespace) ({others})" if others else "")
    return {"expr": expr, "eval_time": f"{END_MIN}m",
            "exp_samples": [{"labels": f'{{namespace="{ns}"}}', "value": TRUTH[ns][unit]} for ns in namespaces]}


def _rules_read_by_the_panels() -> dict:
    """The shipped rule file cut to the rules the billed series are recorded from, directly or through other rules,
    each verbatim in its own group (same name, interval and order): the other ~70 rules are never read by the
    panels, and replaying the day at 15 s through them was most of the run time. A rule left out by mistake would
    leave its series empty and fail the test, not pass it."""
    doc = yaml.safe_load(RULES.read_text())
    records = {r["record"]: r["expr"] for g in doc["groups"] for r in g["rules"] if "record" in r}
    needed, todo = set(), list(BILLED)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += set(re.findall(r"[A-Za-z_:][A-Za-z0-9_:]*", records[name])) & records.keys()
    groups = [{**g, "rules": [r for r in g["rules"] if r.get("record") in needed]} for g in doc["groups"]]
    return {"groups": [g for g in groups if g["rules"]]}


def _promtool_test(rules: Path) -> dict:
    inside = [ns for ns, _, _, first, _ in HOLDS if first > START_MIN]   # held from and to inside the day
    return {
        "rule_files": [str(rules)],
        "evaluation_interval": "15s",
        "tests": [{
            "interval": "15s",
            "input_series": _gpu_series() + [_hold_series(*hold) for hold in HOLDS],
            "promql_expr_test": [_case(title, unit, 0.05, list(TRUTH)) for title, unit in PANELS.items()]
                                + [_case(title, unit, 0.001, inside) for title, unit in PANELS.items()],
        }],
    }


@pytest.mark.integration
def test_every_chargeback_panel_bills_the_time_each_namespace_held_its_gpus(promtool, tmp_path):
    """One promtool run for the four panels (each run replays the day through every rule); promtool names the
    query that failed."""
    rules = tmp_path / "chargeback_rules.yaml"
    rules.write_text(yaml.safe_dump(_rules_read_by_the_panels(), sort_keys=False))
    path = tmp_path / "chargeback_test.yaml"
    path.write_text(yaml.safe_dump(_promtool_test(rules), sort_keys=False))
    result = subprocess.run([promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_scenario_holds_what_the_truth_table_says():
    """The truth table is arithmetic on HOLDS: GPU-hours in the billed day, shared GPUs split between pods."""
    sharers = Counter(uuid for _, _, uuid, _, _ in HOLDS)
    for namespace, _, uuid, first, minutes in HOLDS:
        held = min(first + minutes, END_MIN) - max(first, START_MIN)
        hours = held / 60 / sharers[uuid]
        assert TRUTH[namespace] == pytest.approx((hours, hours * WATTS[uuid] / 1000))
