"""A GPU fallen off the bus before the exporter (or the power-cap agent) started: the node's other GPUs are still
served. NVML's GpuIsLost on naming it raised out of the backend's start, so the exporter exited (as bad input) and
restarted for good, and no GPU of the node had a series (nor any cap applied)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from exporters.backends.fake_nvml import FakeDevice, FakeMig, FakeNvml, NVMLError_GpuIsLost
from exporters.backends.nvml import NvmlBackend
from exporters.collector import GpuCollector
from exporters.power_caps import JsonFileCaps, PowerCapAgent


def devices() -> list[FakeDevice]:
    return [FakeDevice(uuid=f"GPU-{i}", minor=i, bus_id=f"00000000:{0x18 + 16 * i:02X}:00.0",
                       migs=[FakeMig(f"MIG-{i}", gpu_instance_id=3)] if i == 2 else []) for i in range(3)]


def test_a_gpu_lost_before_the_start_is_left_out_and_the_others_keep_their_index():
    gpus = devices()
    gpus[1].lost = True
    backend = NvmlBackend(FakeNvml(gpus), hostname="n1")
    assert [(g.gpu, g.uuid, g.device) for g in backend.identity] == [("0", "GPU-0", "nvidia0"),
                                                                    ("2", "GPU-2", "nvidia2")]
    reg = CollectorRegistry()
    reg.register(GpuCollector(backend))
    assert reg.get_sample_value("DCGM_FI_DEV_GPU_TEMP", {**backend.identity[1].labels()}) == 45
    assert backend.mig_instance("2:0").parent_uuid == "GPU-2"   # a device plugin's index IDs still name GPU 2
    assert backend.mig_instance("1:0") is None


def test_a_gpu_lost_while_it_is_named_is_served_as_lost():
    gpus = devices()
    gpus[1].fail["nvmlDeviceGetName"] = NVMLError_GpuIsLost   # falls off the bus between its UUID and its name
    backend = NvmlBackend(FakeNvml(gpus), hostname="n1")
    gpus[1].lost = True
    assert [g.model_name for g in backend.identity] == ["NVIDIA H100 80GB HBM3", "", "NVIDIA H100 80GB HBM3"]
    r = backend.read()
    assert r.values["DCGM_FI_DEV_XID_ERRORS"].tolist() == [0, 79, 0]
    assert r.values["DCGM_FI_DEV_GPU_TEMP"][[0, 2]].tolist() == [45, 45]


def test_the_power_cap_agent_caps_the_other_gpus(tmp_path):
    gpus = devices()
    gpus[0].lost = True
    path = tmp_path / "caps.json"
    path.write_text('{"GPU-1": 400}')
    agent = PowerCapAgent(JsonFileCaps(path), NvmlBackend(FakeNvml(gpus)))
    assert agent.sync() == {"GPU-1": 400.0} and gpus[1].limit_mw == 400_000
