"""A field a GPU does not have (NVML's NotSupported) is no collect error: no series, listed as unsupported, not asked
again. Real errors (NoPermission, Unknown, a lost GPU) stay collect errors and are asked again."""

from __future__ import annotations

import pytest
from exporter_scrapes import Scrape

from balancer import fleet as fleet_mod
from balancer.model import Node
from balancer.sim import SimCluster
from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_NoPermission, NVMLError_NotSupported
from exporters.backends.nvml import NvmlBackend
from exporters.backends.sim import NOT_SIMULATED, REMAPPER_FIELDS, SimBackend
from exporters.collector import GPU_FIELD_NAMES, GpuCollector

FB = {"DCGM_FI_DEV_FB_USED", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"}


def _fake(n: int = 2, **kw) -> tuple[FakeNvml, list[FakeDevice]]:
    devs = [FakeDevice(uuid=f"GPU-{i:08d}", minor=i, **kw) for i in range(n)]
    return FakeNvml(devs), devs


@pytest.mark.parametrize(("break_it", "gone", "asked"), [
    (lambda d: d.fail.update(nvmlDeviceGetClockInfo=NVMLError_NotSupported), {"DCGM_FI_DEV_SM_CLOCK"},
     "nvmlDeviceGetClockInfo"),
    (lambda d: setattr(d, "mem_temp", None), {"DCGM_FI_DEV_MEMORY_TEMP"}, "nvmlDeviceGetFieldValues:82"),
    (lambda d: (d.field_fail.add(83), d.fail.update(nvmlDeviceGetTotalEnergyConsumption=NVMLError_NotSupported)),
     {"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"}, "nvmlDeviceGetTotalEnergyConsumption"),
    (lambda d: d.fail.update(nvmlDeviceGetMemoryInfo=NVMLError_NotSupported), FB, "nvmlDeviceGetMemoryInfo"),
    (lambda d: (setattr(d, "arch", 8), d.fail.update(nvmlDeviceGetUtilizationRates=NVMLError_NotSupported)),
     {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_PROF_SM_ACTIVE"}, "nvmlDeviceGetUtilizationRates"),
    (lambda d: d.fail.update(nvmlDeviceGetTemperatureThreshold=NVMLError_NotSupported),
     {"DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_SHUTDOWN_TEMP"}, "nvmlDeviceGetTemperatureThreshold"),
    (lambda d: (setattr(d, "ecc_supported", False), setattr(d, "remap_supported", False)),
     set(REMAPPER_FIELDS) | {"DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"},
     "nvmlDeviceGetRemappedRows"),
], ids=["a getter", "a batched field without a getter (no HBM sensor)", "a batched field and its getter",
        "memory info", "utilisation in MIG mode, and SM activity before Hopper with it", "thresholds",
        "ECC off and no row remapper"])
def test_a_field_nvml_does_not_support_has_no_series_no_error_is_listed_and_is_not_asked_again(break_it, gone, asked):
    nvml, devs = _fake(2)
    break_it(devs[0])
    collector = GpuCollector(NvmlBackend(nvml))
    bad, good = devs[0].uuid, devs[1].uuid
    first = Scrape(collector)
    calls = nvml.asked.count((asked, bad))
    for _ in range(2):
        scrape = Scrape(collector)
    assert scrape.present(bad) == set(GPU_FIELD_NAMES) - gone and scrape.present(good) == set(GPU_FIELD_NAMES)
    assert first.lacks(bad) == scrape.lacks(bad) == gone and scrape.lacks(good) == set()
    assert scrape.errors == {}
    assert calls >= 1 and nvml.asked.count((asked, bad)) == calls   # the board's answer: asked in one scrape only


@pytest.mark.parametrize("break_it", [
    lambda d: d.fail.update(nvmlDeviceGetClockInfo=NVMLError_NoPermission),
    lambda d: d.field_ret.update({82: FakeNvml.NVML_ERROR_NO_PERMISSION}),
    lambda d: d.field_ret.update({82: FakeNvml.NVML_ERROR_UNKNOWN}),
], ids=["getter NoPermission", "batched field NoPermission", "batched field Unknown"])
def test_a_real_error_stays_a_collect_error_and_is_asked_again(break_it):
    nvml, devs = _fake(1)
    break_it(devs[0])
    collector = GpuCollector(NvmlBackend(nvml))
    Scrape(collector)
    scrape = Scrape(collector)
    (field,) = set(GPU_FIELD_NAMES) - scrape.present(devs[0].uuid)
    assert scrape.errors == {(devs[0].uuid, field): 2.0} and scrape.unsupported == set()
    devs[0].fail.clear()
    devs[0].field_ret.clear()
    assert field in Scrape(collector).present(devs[0].uuid)   # asked again: back once NVML answers


def test_thresholds_are_asked_until_they_answer_once_and_a_failure_meanwhile_is_an_error():
    nvml, devs = _fake(1)
    devs[0].fail["nvmlDeviceGetTemperatureThreshold"] = NVMLError_NoPermission
    collector = GpuCollector(NvmlBackend(nvml))
    scrape = Scrape(collector)
    assert scrape.failed(devs[0].uuid) == {"DCGM_FI_DEV_SLOWDOWN_TEMP", "DCGM_FI_DEV_SHUTDOWN_TEMP"}
    devs[0].fail.clear()
    Scrape(collector)
    asked = nvml.calls.count("nvmlDeviceGetTemperatureThreshold")
    scrape = Scrape(collector)
    assert scrape.values["DCGM_FI_DEV_SLOWDOWN_TEMP"][devs[0].uuid] == 87
    assert nvml.calls.count("nvmlDeviceGetTemperatureThreshold") == asked


def test_a_lost_gpu_keeps_its_unsupported_fields_unsupported_and_counts_the_rest_as_errors():
    nvml, devs = _fake(1, remap_supported=False)
    collector = GpuCollector(NvmlBackend(nvml))
    Scrape(collector)
    devs[0].lost = True
    scrape = Scrape(collector)
    u = devs[0].uuid
    assert scrape.present(u) == {"DCGM_FI_DEV_XID_ERRORS"}
    assert scrape.lacks(u) == set(REMAPPER_FIELDS)
    assert scrape.failed(u) == set(GPU_FIELD_NAMES) - set(REMAPPER_FIELDS) - {"DCGM_FI_DEV_XID_ERRORS"}


def test_gpm_answering_not_supported_is_turned_off_and_sm_activity_is_unsupported_not_utilisation():
    nvml, devs = _fake(1, arch=9, gpm_sm_util=55.0, util=60)
    devs[0].fail["nvmlGpmSampleGet"] = NVMLError_NotSupported   # e.g. a Hopper board in MIG mode
    collector = GpuCollector(NvmlBackend(nvml))
    for _ in range(3):
        scrape = Scrape(collector)
    assert nvml.calls.count("nvmlGpmSampleGet") == 1
    assert devs[0].uuid not in scrape.values["DCGM_FI_PROF_SM_ACTIVE"]
    assert scrape.values["DCGM_FI_DEV_GPU_UTIL"][devs[0].uuid] == 60
    assert scrape.errors == {} and scrape.unsupported == {(devs[0].uuid, "DCGM_FI_PROF_SM_ACTIVE")}


def test_a_board_that_supports_everything_adds_no_unsupported_series():
    nvml, _ = _fake(2)
    scrape = Scrape(GpuCollector(NvmlBackend(nvml)))
    assert scrape.unsupported == set() and scrape.errors == {}
    assert "# TYPE gputide_exporter_unsupported_field_info gauge\n" in scrape.text


def test_the_simulated_fleet_lists_a_model_without_row_remapper_as_unsupported_online_or_not():
    fl = fleet_mod.build("t", [Node(name="h100-0", gpu_model="H100-SXM", gpu_count=1),
                               Node(name="t4-0", gpu_model="T4", gpu_count=2)])
    sim = SimCluster(fl, seed=0)
    h100, t4, t4_lost = (g.uuid for g in sim.fleet.gpus)
    sim.fail_gpu(2)
    scrape = Scrape(GpuCollector(SimBackend(sim)))
    assert scrape.lacks(t4) == scrape.lacks(t4_lost) == set(REMAPPER_FIELDS) and scrape.lacks(h100) == set()
    assert scrape.failed(t4) == scrape.failed(h100) == set()
    simulated = set(GPU_FIELD_NAMES) - set(NOT_SIMULATED)
    assert scrape.failed(t4_lost) == simulated - set(REMAPPER_FIELDS) - {"DCGM_FI_DEV_XID_ERRORS"}
    assert scrape.present(t4) == simulated - set(REMAPPER_FIELDS)
