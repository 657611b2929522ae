"""DCGM_FI_DEV_POWER_MGMT_LIMIT is the power management limit, as DCGM reports it and the power-cap agent reads it.

NVML's field 190 (``NVML_FI_DEV_POWER_CURRENT_LIMIT``) and ``nvmlDeviceGetEnforcedPowerLimit`` answer the limit the
driver *enforces*, which an out-of-band limit (the BMC, a chassis power brake) can hold below the management limit
``nvidia-smi -pl`` and the agent set. Published under the management limit's name, the controller read a cap
gputide set as gone (a give-back's restore entry pruned before any agent carried it out: the cap stayed on).
"""

from __future__ import annotations

from exporters.backends.fake_nvml import FakeDevice, FakeNvml
from exporters.backends.nvml import NvmlBackend
from exporters.power_caps import PowerLimit

NAME = "DCGM_FI_DEV_POWER_MGMT_LIMIT"


def test_the_published_limit_is_the_management_limit_not_the_one_an_out_of_band_limit_enforces():
    # gputide capped GPU-0 at 450 W; the BMC holds it at 400 W for now. GPU-1: nothing but the default
    devs = [FakeDevice(uuid="GPU-0", limit_mw=450_000, enforced_mw=400_000), FakeDevice(uuid="GPU-1", minor=1)]
    backend = NvmlBackend(FakeNvml(devs), hostname="h")
    assert backend.read().values[NAME].tolist() == [450.0, 700.0]
    # the agent judges its caps by the same limit
    assert backend.power_limits()["GPU-0"] == PowerLimit(450.0, 700.0, 200.0)


def test_a_cap_set_by_the_agent_is_what_the_next_scrape_reports():
    devs = [FakeDevice(uuid="GPU-0", enforced_mw=650_000)]
    backend = NvmlBackend(FakeNvml(devs), hostname="h")
    backend.apply_power_caps({"GPU-0": 500.0})
    devs[0].enforced_mw = 500_000
    assert backend.read().values[NAME].tolist() == [500.0]
    devs[0].enforced_mw = 300_000   # an out-of-band limit below the cap: the cap is still gputide's
    assert backend.read().values[NAME].tolist() == [500.0]
