"""Power caps on a MIG GPU: the limit is the physical GPU's (NVML sets it on the parent device, shared by every GPU
instance), named by the GPU's UUID as dcgm-exporter's ``UUID`` label names it on MIG series too. An entry naming a
MIG device (a hand edit) was logged as "no such GPU on this node (replaced?)", sending an SRE after a replaced GPU;
it is ignored and the log says why (fake NVML)."""

from __future__ import annotations

import json
import logging

from exporters.backends.fake_nvml import FakeDevice, FakeMig, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import JsonFileCaps, PowerCapAgent


def test_a_mig_gpu_is_capped_as_one_gpu_and_a_mig_device_entry_is_ignored_with_the_reason(tmp_path, caplog):
    gpu = FakeDevice(uuid="GPU-0", migs=[FakeMig("MIG-a", gpu_instance_id=1, profile="3g.40gb"),
                                         FakeMig("MIG-b", gpu_instance_id=2, profile="4g.40gb")])
    caps = tmp_path / "caps.json"
    caps.write_text(json.dumps({"GPU-0": 400, "MIG-a": 300}))
    backend = NvmlBackend(FakeNvml([gpu]))
    assert set(backend.power_limits()) == {"GPU-0"}   # the instances have no limit of their own
    caplog.set_level(logging.WARNING)
    agent = PowerCapAgent(JsonFileCaps(caps), backend)
    assert agent.sync() == {"GPU-0": 400.0} and gpu.limit_mw == 400_000 and agent.failed is None
    [why] = [r.getMessage() for r in caplog.records if "MIG-a" in r.getMessage()]
    assert "MIG device" in why and "replaced" not in why
