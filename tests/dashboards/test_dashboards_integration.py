"""Every dashboard panel fed by the exporter and rules/ returns data from a real Prometheus that scrapes the
simulated fleet (exporters.backends.sim over exporters.server) and loads rules/*.yaml; the PNG previews are
rendered from it.

Panels on the controller's own `gputide_*` series need the reconcile loop running against the same fleet
with its metrics served; until the loop exposes every series of docs/metrics.md section 3 they are reported
(xfail, not strict) rather than asserted.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from balancer import dashboards_render as dr

pytestmark = pytest.mark.integration
ROOT = Path(__file__).resolve().parents[2]


def _panels() -> list[tuple[str, str, bool]]:
    out = []
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        for panel in json.loads(path.read_text())["panels"]:
            if panel["type"] != "row":
                controller = any("gputide_" in t["expr"] for t in panel.get("targets", []))
                out.append((path.stem, panel["title"], controller))
    return out


PANELS = _panels()


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, request):
    from balancer.app import scenarios
    from balancer.telemetry.promserver import PrometheusServer, Target, default_rule_files
    from exporters.backends.sim import SimBackend
    from exporters.collector import GpuCollector
    from exporters.server import serve
    from tests.conftest import require_binary

    require_binary("prometheus")
    sim, _events, _days = scenarios.build("hotspot", seed=1)
    exporter = serve(GpuCollector(SimBackend(sim, speed=120.0)), port=0)
    prom = PrometheusServer([Target("gputide-exporter", f"127.0.0.1:{exporter.port}")],
                            rule_files=default_rule_files(), scrape_interval="1s")
    try:
        prom.start()
        prom.wait_for("gpu:temperature:celsius", lambda r: len(r) > 0, timeout=30)
        time.sleep(20)  # enough samples for rate() windows and the heatmaps
        out = tmp_path_factory.mktemp("png")
        report = dr.render(prom.url, out, range_s=120, step=2)
    finally:
        prom.stop()
        prom.cleanup()
        exporter.close()
    return report


@pytest.mark.parametrize(
    ("dashboard", "title", "controller"), PANELS, ids=[f"{d}: {t}" for d, t, _ in PANELS])
def test_panel_returns_data(rendered, dashboard, title, controller):
    has_data = title not in rendered.empty_panels[dashboard]
    if controller and not has_data:
        pytest.xfail("controller series: needs the reconcile loop serving its metrics against the same fleet")
    assert has_data, f"{dashboard}: panel {title!r} had no data"


def test_previews_are_written(rendered):
    assert len(rendered.written) == 5
    assert all(p.stat().st_size > 10_000 for p in rendered.written)
