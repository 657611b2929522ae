"""What a real NVIDIA H200 published through `gputide exporter --backend nvml`, replayed through the real Prometheus.

The scrapes in bench/device/h200-2026-12-04 were taken on a real board (bench/device/check_nvml.py): idle, and
under a bf16 matrix-product load at its 700 W default limit. On that machine the controller exited 2 on both, as
"NVIDIA H200" was not in the catalogue; these tests hold the chain exporter text -> rules -> snapshot -> one
controller cycle to what the board reported, for that model and for one the catalogue does not know.
"""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from balancer import catalog
from balancer.cli import main
from balancer.telemetry.prometheus import PrometheusOptions, PrometheusTelemetrySource
from balancer.telemetry.promserver import Target, default_rule_files

RECORDED = Path(__file__).resolve().parents[2] / "bench" / "device" / "h200-2026-12-04"


def _values(text: str) -> dict[str, float]:
    return {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("DCGM_")}


def test_the_catalogue_h200_row_is_what_the_board_reported():
    load = RECORDED.joinpath("metrics-load.prom").read_text()
    (model,) = {s.labels["modelName"] for f in text_string_to_metric_families(load) for s in f.samples
                if s.name == "DCGM_FI_DEV_GPU_TEMP"}
    spec = catalog.by_model_name(model)
    assert spec is not None and spec.key == "H200-SXM"
    v = _values(load)
    assert (spec.slowdown_temp_c, spec.shutdown_temp_c) == (v["DCGM_FI_DEV_SLOWDOWN_TEMP"],
                                                            v["DCGM_FI_DEV_SHUTDOWN_TEMP"])
    assert spec.tdp_w == v["DCGM_FI_DEV_POWER_MGMT_LIMIT"]
    assert spec.memory_mib == v["DCGM_FI_DEV_FB_USED"] + v["DCGM_FI_DEV_FB_FREE"]
    assert catalog.key_of("NVIDIA-H200") == "H200-SXM"   # GPU feature discovery's product label


@pytest.fixture(scope="module")
def replay(module_prometheus_factory, module_metrics_server):
    """Both recorded scrapes, and the load scrape renamed to a board the catalogue does not know, each behind a
    static /metrics and one real Prometheus per cluster label."""
    texts = {name: RECORDED.joinpath(f"metrics-{name}.prom").read_text() for name in ("idle", "load")}
    texts["unknown"] = texts["load"].replace('modelName="NVIDIA H200"', 'modelName="NVIDIA B300 SXM6 AC"')
    targets = [Target("gputide-exporter", module_metrics_server(text).address, {"cluster": name})
               for name, text in texts.items()]
    prom = module_prometheus_factory(targets, rule_files=default_rule_files(), scrape_interval="1s")
    for name in texts:
        prom.wait_for(f'gpu:temperature_headroom:celsius{{cluster="{name}"}}', bool, timeout=30)
        prom.wait_for(f'gpu:memory_unhealthy:bool{{cluster="{name}"}}', bool, timeout=30)
    return prom, texts


@pytest.mark.integration
@pytest.mark.parametrize("cluster", ["idle", "load"])
def test_the_snapshot_holds_what_the_board_reported(replay, cluster):
    prom, texts = replay
    v = _values(texts[cluster])
    s = PrometheusTelemetrySource(PrometheusOptions(url=prom.url, cluster=cluster, scrape_interval_s=1.0)).snapshot()
    assert [g.model for g in s.gpus] == ["H200-SXM"]
    assert s.temperature_c[0] == v["DCGM_FI_DEV_GPU_TEMP"]
    assert s.power_w[0] == pytest.approx(v["DCGM_FI_DEV_POWER_USAGE"])
    assert s.power_limit_w[0] == v["DCGM_FI_DEV_POWER_MGMT_LIMIT"]
    assert s.sm_active[0] == pytest.approx(v["DCGM_FI_PROF_SM_ACTIVE"])
    assert s.clock_event_reasons[0] == v["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"]
    assert s.mem_total_mib[0] == v["DCGM_FI_DEV_FB_USED"] + v["DCGM_FI_DEV_FB_FREE"]
    assert not s.memory_unhealthy[0]


@pytest.mark.integration
@pytest.mark.parametrize("cluster", ["idle", "load", "unknown"])
def test_a_dry_run_cycle_on_the_real_board_holds_nothing_back(replay, cluster, capsys, caplog):
    prom, _ = replay
    with caplog.at_level(logging.WARNING, logger="balancer.telemetry.prometheus"):
        rc = main(["run", "--prometheus", prom.url, "--cluster", cluster, "--dry-run", "--once",
                   "--metrics-port", "0"])
    assert (rc, capsys.readouterr().out.strip()) == (0, "cycle: ok")
    uncatalogued = [r.getMessage() for r in caplog.records if "not in gputide's catalogue" in r.getMessage()]
    assert uncatalogued == (["GPU model 'NVIDIA B300 SXM6 AC' is not in gputide's catalogue: planned with generic "
                             "figures from its power limit (catalog.generic); add it to balancer/catalog.py for "
                             "better ones"] if cluster == "unknown" else [])
