"""NVML answering at start but naming no GPU (a driver still coming up, GPUs not yet bound): the backend served no
GPU until the exporter restarted, which nothing did, since it stayed live (and not ready). Now no GPU at start is
NVML down: each read asks NVML again, as after NVML stopped answering, and serves the GPUs once it names them."""

from __future__ import annotations

from exporter_scrapes import Scrape

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector, nothing_read
from exporters.health import CollectHealth, TrackedCollector
from exporters.power_caps import JsonFileCaps, PowerCapAgent

TEMP = "DCGM_FI_DEV_GPU_TEMP"


def gpu(i: int) -> FakeDevice:
    return FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{0x18 + i:02X}:00.0")


def test_gpus_named_after_the_start_are_served_at_the_next_collection_and_the_exporter_becomes_ready():
    nvml = FakeNvml([])
    backend = NvmlBackend(nvml, hostname="n1")
    collector = GpuCollector(backend)
    health = CollectHealth()
    tracked = TrackedCollector(collector, health)
    tracked.exposition()
    assert health.ready() == (False, "not ready: the last collection found no GPU to read (looked for again at each "
                                     "collection)")
    assert health.live()[0]
    assert backend.nvml_reinit_failures == 1   # asked again, and still none
    nvml.devices.extend([gpu(0), gpu(1)])
    tracked.exposition()
    assert health.ready()[0]
    assert [g.uuid for g in backend.identity] == ["GPU-0", "GPU-1"]   # was (): none until a restart
    s = Scrape(collector)
    assert s.values[TEMP] == {"GPU-0": 45, "GPU-1": 45}
    assert nothing_read(collector.collect()) is None
    assert backend.nvml_reinits == 1


def test_the_power_cap_agent_caps_gpus_named_after_its_start(tmp_path):
    nvml = FakeNvml([])
    path = tmp_path / "caps.json"
    path.write_text('{"GPU-0": 400}')
    agent = PowerCapAgent(JsonFileCaps(path), NvmlBackend(nvml))
    nvml.devices.append(gpu(0))
    agent.sync()
    assert nvml.devices[0].limit_mw == 400_000
