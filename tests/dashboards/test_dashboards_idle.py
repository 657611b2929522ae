"""The fleet-wide panels read a number, 0 included, on an idle fleet and on a fully allocated one.

Replays what a real NVIDIA H200 published through gputide's NVML exporter (bench/device/h200-2026-12-04) to a
real Prometheus with the shipped rules: the idle scrape as cluster "idle" (no workload holds the GPU), and the
load scrape plus a join-table row giving the GPU to a training pod as cluster "allocated". Every stat panel of
every dashboard, and the allocated / used / idle counts, is queried as Grafana would with `$cluster` set to one
of them: a workload class that holds no GPU has no class:gpu_count:sum series, so a plain sum() over it is No
data where the answer is 0 (the "Allocated share" stat on an idle fleet did exactly that); the rules therefore
record 0 for the allocated count and the idle class where the exporter reports GPUs.

Stat panels over the controller's or the scheduler's own series (`gputide_*`) are left out: nothing here runs
them, and No data is the truth when they are not scraped.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from balancer.dashboards_render import interpolate
from balancer.telemetry.promserver import Target, default_rule_files

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]
RECORDED = ROOT / "bench" / "device" / "h200-2026-12-04"
RECORD = re.compile(r"[a-z_]+:[a-z_0-9]+:[a-z_0-9]+")
# panels besides the stats whose every series must be there: the allocated / idle counts are 0, not missing
ALSO = {("fragmentation-utilisation", "Allocated vs used vs idle GPUs")}


def _checked() -> list[tuple[str, str, str, str]]:
    """(dashboard, panel title, legend, expr) of every fleet-wide target: stat panels and ALSO, minus controller
    series."""
    out = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            if panel["type"] != "stat" and (path.stem, panel.get("title")) not in ALSO:
                continue
            for target in panel.get("targets", []):
                if "gputide_" not in target["expr"]:
                    out.append((path.stem, panel["title"], target.get("legendFormat", ""), target["expr"]))
    return out


CHECKED = _checked()
CLUSTERS = ("idle", "allocated")


def _allocated_text(board: int, classes: tuple[str, ...]) -> str:
    """The load scrape as another board (the attribution rules join on UUID alone, and a GPU's UUID is unique),
    with the join table's rows that give it to one pod of each class (two: time-sliced between them)."""
    load = RECORDED.joinpath("metrics-load.prom").read_text()
    (uuid,) = set(re.findall(r'UUID="([^"]+)"', load))
    other = f"GPU-00000000-0000-0000-0000-00000000000{board}"
    return load.replace(uuid, other) + "".join(
        f'gputide_gpu_workload_info{{UUID="{other}",namespace="ml",pod="{cls}-0",workload_class="{cls}"}} 1\n'
        for cls in classes)


@pytest.fixture(scope="module")
def prom(module_prometheus_factory, module_metrics_server):
    texts = {"idle": RECORDED.joinpath("metrics-idle.prom").read_text(),
             "allocated": _allocated_text(1, ("training",)),
             "shared": _allocated_text(2, ("training", "inference"))}
    targets = [Target("gputide-exporter", module_metrics_server(text).address, {"cluster": name})
               for name, text in texts.items()]
    server = module_prometheus_factory(targets, rule_files=default_rule_files(), scrape_interval="1s")
    # every rule a checked panel reads has evaluated, in each cluster (the rule groups start at different offsets);
    # cluster:gpu_allocated:count and the idle class read 0, not nothing, where the exporter reports GPUs
    records = sorted({r for *_, expr in CHECKED for r in RECORD.findall(expr)})
    for cluster in (*CLUSTERS, "shared"):
        for record in records:
            if record == "gpu_pod:attribution:share" and cluster == "idle":
                continue   # no pod holds a GPU there: no series, ever
            server.wait_for(f'{record}{{cluster="{cluster}"}}', bool, timeout=30)
    return server


def _values(prom, expr: str, cluster: str) -> list[float]:
    query = interpolate(expr, {"cluster": cluster, "node": ".*", "model": ".*", "gpu": ".*"}, step=60, range_s=3600)
    return [float(r["value"][1]) for r in prom.query(query)]


@pytest.mark.parametrize("cluster", CLUSTERS)
@pytest.mark.parametrize(("dashboard", "title", "legend", "expr"), CHECKED,
                         ids=[f"{d}: {t} ({lg})" for d, t, lg, _ in CHECKED])
def test_fleet_wide_panel_reads_a_number_not_no_data(prom, dashboard, title, legend, expr, cluster):
    assert _values(prom, expr, cluster), f"{dashboard}: {title!r} ({legend}) has no data on the {cluster} fleet"


def _utilisation(title: str, legend: str) -> str:
    (expr,) = [e for d, t, lg, e in CHECKED if (d, t, lg) == ("fragmentation-utilisation", title, legend)]
    return expr


@pytest.mark.parametrize(("cluster", "share", "allocated", "idle"),
                         [("idle", 0.0, 0.0, 1.0), ("allocated", 1.0, 1.0, 0.0), ("shared", 1.0, 1.0, 0.0)],
                         ids=["an idle fleet is 0 % allocated", "a fully allocated fleet is 100 % allocated, 0 idle",
                              "a GPU shared by two classes is allocated once, not 200 %"])
def test_allocated_share_and_counts_read_what_the_fleet_holds(prom, cluster, share, allocated, idle):
    counts = "Allocated vs used vs idle GPUs"
    assert _values(prom, _utilisation("Allocated share", "allocated"), cluster) == [share]
    assert _values(prom, _utilisation(counts, "allocated"), cluster) == [allocated]
    assert _values(prom, _utilisation(counts, "idle"), cluster) == [idle]


def test_a_cluster_without_gpu_telemetry_still_reads_no_data(prom):
    """A 0 is for a fleet that reports GPUs, not for one that does not exist (the XID stat's `or vector(0)` read 0
    there: it now sums gpu:xid_error:bool, which the rules record 0 for each GPU reported)."""
    for _, title, _, expr in CHECKED:
        assert _values(prom, expr, "nowhere") == [], (title, expr)
