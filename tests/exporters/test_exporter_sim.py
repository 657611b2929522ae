"""The sim exporter: every series for every GPU, dcgm-exporter names and labels, attribution, errors."""

from __future__ import annotations

import re

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from balancer.fleet import demo_fleet
from balancer.sim import SimCluster, default_mix
from exporters.backends.base import LABEL_NAMES
from exporters.backends.sim import DRIVER_VERSION, NOT_SIMULATED, SimBackend
from exporters.collector import GPU_FIELD_NAMES, GpuCollector
from exporters.exposition import render
from exporters.power_caps import JsonFileCaps, PowerCapAgent
from exporters.sim_caps import SimCapTarget


@pytest.fixture(scope="module")
def demo():
    sim = SimCluster(demo_fleet(), seed=0)
    default_mix(sim)
    sim.advance_to(1800)
    return sim


def _scrape(backend) -> tuple[CollectorRegistry, str, dict]:
    reg = CollectorRegistry()
    reg.register(GpuCollector(backend))
    text = render(reg).decode()
    return reg, text, {f.name: f for f in text_string_to_metric_families(text)}


def test_every_dcgm_series_is_exposed_for_every_gpu_of_the_default_fleet_with_dcgm_labels(demo):
    _, _, fams = _scrape(SimBackend(demo))
    uuids = {g.uuid for g in demo.fleet.gpus}
    assert "DCGM_FI_DEV_FB_RESERVED" not in fams   # NOT_SIMULATED
    for name in set(GPU_FIELD_NAMES) - set(NOT_SIMULATED):
        samples = fams[name].samples
        assert {s.labels["UUID"] for s in samples} == uuids, name
        xid = {"err_code", "err_msg"} if name == "DCGM_FI_DEV_XID_ERRORS" else set()
        assert all(set(s.labels) == set(LABEL_NAMES) | xid for s in samples)
    s = fams["DCGM_FI_DEV_GPU_TEMP"].samples[0]
    g = demo.fleet.gpus[0]
    assert s.labels == {"gpu": "0", "UUID": g.uuid, "pci_bus_id": g.pci_bus_id, "device": "nvidia0",
                        "modelName": "NVIDIA H100 80GB HBM3", "Hostname": g.node,
                        "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION}


def test_the_energy_counter_keeps_dcgm_exporters_name_without_a_total_suffix(demo):
    _, text, fams = _scrape(SimBackend(demo))
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION counter\n" in text
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    fam = fams["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"]
    assert fam.type == "counter" and len(fam.samples) == demo.n_gpus
    assert re.search(r"^gputide_exporter_collect_errors_total|# TYPE gputide_exporter_collect_errors_total counter",
                     text, re.M)


def test_values_match_the_simulator_in_dcgm_units(demo):
    reg, _, _ = _scrape(SimBackend(demo))
    g = demo.fleet.gpus[5]
    labels = {"gpu": str(g.slot), "UUID": g.uuid, "pci_bus_id": g.pci_bus_id, "device": f"nvidia{g.slot}",
              "modelName": "NVIDIA H100 80GB HBM3", "Hostname": g.node, "DCGM_FI_DRIVER_VERSION": DRIVER_VERSION}
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", labels) == round(demo.temperature_c[5])
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_UTIL", labels) == round(demo.gpu_util[5] * 100)
    assert reg.get_sample_value("DCGM_FI_DEV_FB_FREE", labels) == round(demo.mem_total_mib[5] - demo.mem_used_mib[5])
    assert reg.get_sample_value("DCGM_FI_DEV_POWER_MGMT_LIMIT", labels) == 700.0


def test_attribution_and_simulated_serving_series_are_exposed(demo):
    _, _, fams = _scrape(SimBackend(demo))
    info = fams["gputide_gpu_workload_info"].samples
    placed = sum(len(g) for g in demo.placements.values())
    assert len(info) == placed
    assert {s.labels["workload_class"] for s in info} == {"inference", "training"}
    assert all(s.value == 1.0 and "/" not in s.labels["pod"] for s in info)
    for name in ("gputide_inference_requests", "gputide_inference_slo_violations", "gputide_inference_demand_rps",
                 "gputide_inference_latency_p99_seconds", "gputide_inference_replicas",
                 "gputide_inference_replicas_ready"):
        assert {s.labels["service"] for s in fams[name].samples} == set(demo.services), name
    asked = {s.labels["service"]: s.value for s in fams["gputide_inference_replicas"].samples}
    ready = {s.labels["service"]: s.value for s in fams["gputide_inference_replicas_ready"].samples}
    assert asked == {n: st.replicas for n, st in demo.service_status().items()}
    assert ready == demo.ready_replicas() and all(ready[n] <= asked[n] for n in asked)
    assert fams["gputide_exporter_scrape_duration_seconds"].samples[0].value > 0


def test_one_node_mode_serves_only_that_nodes_gpus_and_no_service_series(demo):
    node = demo.fleet.nodes[3].name
    _, _, fams = _scrape(SimBackend(demo, node=node))
    temps = fams["DCGM_FI_DEV_GPU_TEMP"].samples
    assert len(temps) == 8 and {s.labels["Hostname"] for s in temps} == {node}
    assert "gputide_inference_requests" not in fams


def test_an_offline_gpu_drops_only_its_failing_series_and_counts_the_errors():
    sim = SimCluster(demo_fleet(), seed=1)
    sim.fail_gpu(3)
    sim.step()
    reg = CollectorRegistry()
    collector = GpuCollector(SimBackend(sim))
    reg.register(collector)
    render(reg)
    text = render(reg).decode()
    fams = {f.name: f for f in text_string_to_metric_families(text)}
    lost = sim.fleet.gpus[3].uuid
    assert lost not in {s.labels["UUID"] for s in fams["DCGM_FI_DEV_GPU_TEMP"].samples}
    assert len(fams["DCGM_FI_DEV_GPU_TEMP"].samples) == sim.n_gpus - 1
    xid = {s.labels["UUID"]: s.value for s in fams["DCGM_FI_DEV_XID_ERRORS"].samples}
    assert xid[lost] == 79 and len(xid) == sim.n_gpus
    assert reg.get_sample_value("gputide_exporter_collect_errors_total",
                                {"UUID": lost, "field": "DCGM_FI_DEV_GPU_TEMP"}) == 3.0  # 3rd read


def test_the_sim_backend_advances_simulated_time_with_wall_clock_times_speed():
    sim = SimCluster(demo_fleet(), seed=0)
    wall = [100.0]
    backend = SimBackend(sim, speed=60.0, clock=lambda: wall[0])
    backend.read()
    assert sim.time == 0.0
    wall[0] += 10.0
    backend.read()
    assert sim.time == 600.0


def test_power_caps_from_a_json_file_are_applied_clamped_and_reported(tmp_path, demo):
    sim = SimCluster(demo_fleet(), seed=0)
    u0, u1 = sim.fleet.gpus[0].uuid, sim.fleet.gpus[1].uuid
    caps = tmp_path / "caps.json"
    caps.write_text(f'{{"{u0}": 450, "{u1}": 10, "GPU-unknown": 300}}')
    agent = PowerCapAgent(JsonFileCaps(caps), SimCapTarget(sim))
    assert agent.sync() == {u0: 450.0, u1: 200.0}
    assert agent.sync() == {}
    reg, _, fams = _scrape(SimBackend(sim))
    limits = {s.labels["UUID"]: s.value for s in fams["DCGM_FI_DEV_POWER_MGMT_LIMIT"].samples}
    assert limits[u0] == 450.0 and limits[u1] == 200.0


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"GPU-x": "hot"}'],
                         ids=["unparseable", "not an object", "watts not a number"])
def test_a_broken_caps_file_reads_as_unknown_and_a_missing_one_as_no_caps(tmp_path, content):
    path = tmp_path / "caps.json"
    path.write_text(content)
    assert JsonFileCaps(path).read() is None   # not "no caps", which would give every capped GPU back
    assert JsonFileCaps(tmp_path / "missing.json").read() == {}


def test_the_http_server_serves_metrics_on_a_free_port_and_404s_elsewhere():
    import urllib.error
    import urllib.request

    from exporters.server import serve

    sim = SimCluster(demo_fleet(), seed=0)
    reg = CollectorRegistry()
    reg.register(GpuCollector(SimBackend(sim, node=sim.fleet.nodes[0].name)))
    server = serve(reg, port=0)
    try:
        assert server.port > 0
        resp = urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=10)
        assert resp.headers["Content-Type"].startswith("text/plain; version=0.0.4")
        fams = {f.name for f in text_string_to_metric_families(resp.read().decode())}
        assert set(GPU_FIELD_NAMES) - set(NOT_SIMULATED) <= fams
        with pytest.raises(urllib.error.HTTPError) as err:
            urllib.request.urlopen(f"http://127.0.0.1:{server.port}/nope", timeout=10)
        assert err.value.code == 404
    finally:
        server.close()
