"""ECC and row-remapper series: from NVML (batch, then the classic getters) and from the simulated fleet.

A board that does not support them (NotSupported: GeForce, ECC off, no row remapper before Ampere) has no series
and no collect error, and is listed in gputide_exporter_unsupported_field_info; other errors are counted; the scrape
never fails.
"""

from __future__ import annotations

import pytest
from exporter_scrapes import Scrape

from balancer import fleet as fleet_mod
from balancer.model import Node
from balancer.sim import SimCluster
from exporters.backends.fake_nvml import FakeDevice, FakeNvml, NVMLError_GpuIsLost, NVMLError_NoPermission
from exporters.backends.nvml import ECC_FIELDS, REMAP_FIELDS, NvmlBackend
from exporters.backends.sim import SimBackend
from exporters.collector import GPU_FIELD_NAMES, GpuCollector

ECC, REMAP = tuple(ECC_FIELDS), tuple(REMAP_FIELDS)
MEMORY = ECC + REMAP


def _fake(n: int = 2, **kw) -> tuple[FakeNvml, list[FakeDevice]]:
    devs = [FakeDevice(uuid=f"GPU-{i:08d}", minor=i, **kw) for i in range(n)]
    return FakeNvml(devs), devs


def _scrape(backend) -> tuple[Scrape, str, dict[str, dict[str, float]]]:
    s = Scrape(GpuCollector(backend))
    return s, s.text, s.values


def _errors(s: Scrape, uuid: str) -> set[str]:
    return s.failed(uuid)


def test_memory_health_comes_from_the_one_batched_call_in_dcgm_exporters_names_and_types():
    nvml, devs = _fake(2, dbe_volatile=2, remap_pending=1, remapped_uncorrectable=4)
    _, text, v = _scrape(NvmlBackend(nvml))
    u = devs[0].uuid
    assert {n: v[n][u] for n in MEMORY} == {
        "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL": 3, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 2,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 1, "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 4,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 1, "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0}
    assert "nvmlDeviceGetTotalEccErrors" not in nvml.calls and "nvmlDeviceGetRemappedRows" not in nvml.calls
    assert "# TYPE DCGM_FI_DEV_ECC_DBE_VOL_TOTAL counter\n" in text
    assert "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL_total" not in text
    assert "# TYPE DCGM_FI_DEV_ROW_REMAP_PENDING gauge\n" in text


@pytest.mark.parametrize(("fields", "getter"), [
    ({4}, "nvmlDeviceGetTotalEccErrors"),
    ({142, 143, 144, 145}, "nvmlDeviceGetRemappedRows"),
], ids=["a DBE field the driver lacks: nvmlDeviceGetTotalEccErrors", "remapper fields: nvmlDeviceGetRemappedRows"])
def test_a_field_the_batch_does_not_return_falls_back_to_the_classic_getter(fields, getter):
    nvml, devs = _fake(1, dbe_volatile=5, remapped_correctable=7, remap_failure=1)
    devs[0].field_fail |= fields
    reg, _, v = _scrape(NvmlBackend(nvml))
    u = devs[0].uuid
    assert nvml.calls.count(getter) == 1
    assert v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"][u] == 5
    assert v["DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"][u] == 7 and v["DCGM_FI_DEV_ROW_REMAP_FAILURE"][u] == 1
    assert _errors(reg, u) == set()


@pytest.mark.parametrize(("kw", "gone", "getter"), [
    ({"ecc_supported": False}, set(ECC), "nvmlDeviceGetTotalEccErrors"),
    ({"remap_supported": False}, set(REMAP), "nvmlDeviceGetRemappedRows"),
    ({"ecc_supported": False, "remap_supported": False}, set(MEMORY), "nvmlDeviceGetRemappedRows"),
], ids=["ECC off or a GeForce board", "no row remapper (before Ampere)", "neither"])
def test_a_board_without_the_feature_has_no_series_and_no_error_is_listed_and_is_not_asked_again(kw, gone, getter):
    nvml, devs = _fake(2)
    for k, value in kw.items():
        setattr(devs[0], k, value)
    backend = NvmlBackend(nvml)
    collector = GpuCollector(backend)
    for _ in range(3):
        scrape = Scrape(collector)
    bad, good = devs[0].uuid, devs[1].uuid
    for name in GPU_FIELD_NAMES:
        assert good in scrape.values[name], name
        assert (bad in scrape.values[name]) == (name not in gone), name
    assert scrape.failed(bad) == scrape.failed(good) == set()
    assert scrape.lacks(bad) == gone and scrape.lacks(good) == set()
    assert nvml.calls.count(getter) == 1   # NotSupported is the board's: asked once


def test_another_nvml_error_drops_the_series_counts_it_and_asks_again_next_scrape():
    nvml, devs = _fake(2)
    devs[0].field_fail |= {3, 4}
    devs[0].fail["nvmlDeviceGetTotalEccErrors"] = NVMLError_NoPermission
    collector = GpuCollector(NvmlBackend(nvml))
    Scrape(collector)
    second = Scrape(collector)
    v, bad = second.values, devs[0].uuid
    assert second.failed(bad) == set(ECC)
    assert second.errors[(bad, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")] == 2.0
    assert bad not in v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"] and bad in v["DCGM_FI_DEV_ROW_REMAP_PENDING"]
    assert nvml.calls.count("nvmlDeviceGetTotalEccErrors") == 2


def test_a_gpu_lost_in_the_memory_getter_keeps_only_xid_79():
    nvml, devs = _fake(2)
    backend = NvmlBackend(nvml)
    _scrape(backend)   # GPM's first sample: SM activity from the second scrape on
    devs[0].field_fail |= {142}
    devs[0].fail["nvmlDeviceGetRemappedRows"] = NVMLError_GpuIsLost
    _, _, v = _scrape(backend)
    lost = devs[0].uuid
    assert v["DCGM_FI_DEV_XID_ERRORS"][lost] == 79
    assert all(lost not in v[n] for n in GPU_FIELD_NAMES if n != "DCGM_FI_DEV_XID_ERRORS")
    assert all(devs[1].uuid in v[n] for n in GPU_FIELD_NAMES)


def _sim() -> SimCluster:
    fl = fleet_mod.build("t", [Node(name="h100-0", gpu_model="H100-SXM", gpu_count=2),
                               Node(name="t4-0", gpu_model="T4", gpu_count=2)])
    return SimCluster(fl, seed=0)


def test_the_simulated_fleet_reports_a_dbe_and_its_pending_remap_until_the_gpu_is_reset():
    sim = _sim()
    h100, t4 = sim.fleet.gpus[0].uuid, sim.fleet.gpus[2].uuid
    sim.memory.correctable(0, errors=4)
    sim.ecc_error(0)
    sim.ecc_error(2)
    reg, _, v = _scrape(SimBackend(sim))
    assert v["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"][h100] == 4 and v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"][h100] == 1
    assert v["DCGM_FI_DEV_ROW_REMAP_PENDING"][h100] == 1 and v["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"][h100] == 0
    assert v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"][t4] == 1
    assert all(t4 not in v[n] for n in REMAP)          # a T4 has no row remapper: no series, no error
    assert _errors(reg, t4) == _errors(reg, h100) == set() and reg.lacks(t4) == set(REMAP)
    sim.repair_gpu(0)
    _, _, v = _scrape(SimBackend(sim))
    assert v["DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"][h100] == 0 and v["DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"][h100] == 0
    assert v["DCGM_FI_DEV_ROW_REMAP_PENDING"][h100] == 0 and v["DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"][h100] == 1


def test_the_simulated_fleet_reports_a_failed_remap_until_the_board_is_replaced():
    sim = _sim()
    u = sim.fleet.gpus[1].uuid
    sim.row_remap_failure(1)
    _, _, v = _scrape(SimBackend(sim))
    assert v["DCGM_FI_DEV_ROW_REMAP_FAILURE"][u] == 1 and v["DCGM_FI_DEV_XID_ERRORS"][u] == 64
    sim.repair_gpu(1)
    _, _, v = _scrape(SimBackend(sim))
    assert v["DCGM_FI_DEV_ROW_REMAP_FAILURE"][u] == 0
    with pytest.raises(ValueError, match="no row remapper"):
        sim.row_remap_failure(2)
